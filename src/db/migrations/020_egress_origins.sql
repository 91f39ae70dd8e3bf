-- Where each entry of a workshop's live egress policy came from (`atelier workshops status`, GET
-- /v1/workshops/:id `egress.policy`). The platform's entries are the server's configuration and
-- the project's are atelier.yaml's `egress:` block (both already known); an entry added by an
-- approved ALLOWLIST_EXPANSION request now keeps that request, who decided it and when, beside the
-- `approved` list: egress->'origins' maps each approved entry to {requestId, decidedBy, decidedAt}.
-- Entries approved before this migration: taken from the approved request that named them (the
-- earliest decided), else recorded with null fields (shown as "not recorded").
UPDATE workshops w
   SET egress = jsonb_set(w.egress, '{origins}', coalesce(w.egress->'origins', '{}'::jsonb) || coalesce((
     SELECT jsonb_object_agg(a.entry, jsonb_build_object(
              'requestId', r.id::text,
              'decidedBy', r.decided_by,
              'decidedAt', to_char(r.decided_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
       FROM jsonb_array_elements_text(w.egress->'approved') AS a(entry)
       LEFT JOIN LATERAL (
         SELECT h.id, h.decided_by, h.decided_at FROM hitl_requests h
          WHERE h.workshop_id = w.id AND h.category = 'ALLOWLIST_EXPANSION' AND h.status = 'APPROVED'
            AND h.payload->>'entry' = a.entry
          ORDER BY h.decided_at LIMIT 1) r ON true
   ), '{}'::jsonb))
 WHERE jsonb_typeof(w.egress->'approved') = 'array';
