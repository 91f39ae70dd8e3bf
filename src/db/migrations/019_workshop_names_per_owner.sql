-- Workshops are addressed by name as well as by id (`atelier exec api -- make`). A name is unique
-- per owner: two members of a tenant may each have an `api`; a name resolves to the caller's own
-- workshop first, else to the tenant's only workshop of that name (several: the server says which
-- ids to use). Existing rows: names were unique per tenant until now, so none can collide under
-- the new, weaker rule. Workshops whose owner was removed (owner_id NULL) never collide either.
ALTER TABLE workshops DROP CONSTRAINT IF EXISTS workshops_name_key;
DROP INDEX IF EXISTS workshops_tenant_name;
CREATE UNIQUE INDEX workshops_owner_name ON workshops (tenant_id, owner_id, name);
CREATE INDEX workshops_tenant_name ON workshops (tenant_id, name);
-- A name shaped like an id (ws- and 8 letters or digits) would never be reached by name: ids win.
-- Such names are refused at create time from now on; an existing one gets a suffix of its own id.
UPDATE workshops SET name = name || '-' || substr(id, 4, 4) WHERE name ~ '^ws-[0-9a-z]{8}$';
