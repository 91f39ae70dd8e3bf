-- Armed tunnels (a port-forward's spare connections, authorised once and kept for ~30 s) are
-- cut by every server the moment what authorised them changes: a token revoked, expired early or
-- narrowed, a user disabled or deleted, a membership changed or removed, a workshop stopped,
-- moved or deleted. Each such change notifies `atelier_tunnel_grants` with what changed
-- (`token:ID`, `user:ID`, `workshop:ID`); servers LISTEN and arm nothing while not listening.
CREATE FUNCTION atelier_tunnel_grants_notify() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  IF TG_OP = 'DELETE' THEN r := OLD; ELSE r := NEW; END IF;
  IF TG_TABLE_NAME = 'api_tokens' THEN
    PERFORM pg_notify('atelier_tunnel_grants', 'token:' || OLD.id);
  ELSIF TG_TABLE_NAME = 'users' THEN
    PERFORM pg_notify('atelier_tunnel_grants', 'user:' || OLD.id);
  ELSIF TG_TABLE_NAME = 'memberships' THEN
    PERFORM pg_notify('atelier_tunnel_grants', 'user:' || OLD.user_id);
  ELSIF TG_TABLE_NAME = 'workshops' THEN
    PERFORM pg_notify('atelier_tunnel_grants', 'workshop:' || OLD.id);
  END IF;
  RETURN r;
END;
$$;

CREATE TRIGGER api_tokens_tunnel_grants AFTER UPDATE ON api_tokens FOR EACH ROW
  WHEN (OLD.revoked_at IS DISTINCT FROM NEW.revoked_at OR OLD.expires_at IS DISTINCT FROM NEW.expires_at
        OR OLD.role IS DISTINCT FROM NEW.role OR OLD.user_id IS DISTINCT FROM NEW.user_id
        OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id OR OLD.workshop_id IS DISTINCT FROM NEW.workshop_id
        OR OLD.token_hash IS DISTINCT FROM NEW.token_hash)
  EXECUTE FUNCTION atelier_tunnel_grants_notify();
CREATE TRIGGER api_tokens_tunnel_grants_delete AFTER DELETE ON api_tokens FOR EACH ROW
  EXECUTE FUNCTION atelier_tunnel_grants_notify();

CREATE TRIGGER users_tunnel_grants AFTER UPDATE ON users FOR EACH ROW
  WHEN (OLD.disabled_at IS DISTINCT FROM NEW.disabled_at)
  EXECUTE FUNCTION atelier_tunnel_grants_notify();
CREATE TRIGGER users_tunnel_grants_delete AFTER DELETE ON users FOR EACH ROW
  EXECUTE FUNCTION atelier_tunnel_grants_notify();

CREATE TRIGGER memberships_tunnel_grants AFTER UPDATE OR DELETE ON memberships FOR EACH ROW
  EXECUTE FUNCTION atelier_tunnel_grants_notify();

CREATE TRIGGER workshops_tunnel_grants AFTER UPDATE ON workshops FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.sandbox IS DISTINCT FROM NEW.sandbox
        OR OLD.owner_id IS DISTINCT FROM NEW.owner_id OR OLD.tenant_id IS DISTINCT FROM NEW.tenant_id
        OR OLD.node_id IS DISTINCT FROM NEW.node_id)
  EXECUTE FUNCTION atelier_tunnel_grants_notify();
CREATE TRIGGER workshops_tunnel_grants_delete AFTER DELETE ON workshops FOR EACH ROW
  EXECUTE FUNCTION atelier_tunnel_grants_notify();
