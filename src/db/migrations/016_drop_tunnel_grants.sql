-- Armed spare tunnels are gone (issue 21): nothing listens on `atelier_tunnel_grants` any more,
-- so migration 015's triggers and their function go. A token revoked, a user disabled, a
-- workshop stopped or deleted is enforced as before: each tunnel is authorised when it opens.
DROP TRIGGER IF EXISTS api_tokens_tunnel_grants ON api_tokens;
DROP TRIGGER IF EXISTS api_tokens_tunnel_grants_delete ON api_tokens;
DROP TRIGGER IF EXISTS users_tunnel_grants ON users;
DROP TRIGGER IF EXISTS users_tunnel_grants_delete ON users;
DROP TRIGGER IF EXISTS memberships_tunnel_grants ON memberships;
DROP TRIGGER IF EXISTS workshops_tunnel_grants ON workshops;
DROP TRIGGER IF EXISTS workshops_tunnel_grants_delete ON workshops;
DROP FUNCTION IF EXISTS atelier_tunnel_grants_notify();
