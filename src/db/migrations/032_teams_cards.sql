-- Microsoft Teams: the requests whose card was posted to the Workflows webhook, and whether the
-- follow-up (decided or expired) was posted, so each card gets exactly one, whichever replica
-- decides the request.
CREATE TABLE hitl_teams_cards (
  request_id      uuid PRIMARY KEY REFERENCES hitl_requests(id),
  posted_at       timestamptz NOT NULL DEFAULT now(),
  followed_up_at  timestamptz
);
