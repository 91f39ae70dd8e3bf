import { existsSync, realpathSync, statSync } from 'node:fs';
import { basename, isAbsolute, sep } from 'node:path';
import { AtelierError, newId } from '../core/index.js';
import type { Pool } from '../db/index.js';
import { ensureActionsDir, PROJECT_FILE, readProjectFile, writeProjectFile } from './projectFiles.js';
import type { StackBackend } from './stackBackends.js';
import { STACKS } from './stacks.js';
import type { Actor, Project } from './types.js';

/** What `atelier projects add` writes when the repository has no atelier.yaml yet. */
export const DEFAULT_PROJECT_FILE = `# atelier.yaml: this project's settings for Atelier (see Atelier's README).
# Typed actions (\`atelier actions …\`) edit one key at a time and keep the rest of this file as it is.

# What the workshops of this project may reach through the egress proxy.
egress:
  allow: []   # host names, *.suffix or host:port, for example api.stripe.com
  deny: []
  # askHoldSeconds: 30

# Simulators started with each workshop (name, version, env, services, stubsDirectory);
# without a version, the newest the server has installed (a version it has not is refused):
# simulators:
#   - name: postgres
#     env: { POSTGRES_DB: app }

# Shared, long-lived simulator instances attached to this project:
# slots: []
`;

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

interface Row {
  id: string;
  tenant_id: string;
  name: string;
  path: string;
  created_at: Date;
}

function toProject(r: Row): Project {
  return { id: r.id, tenantId: r.tenant_id, name: r.name, path: r.path, createdAt: r.created_at.toISOString() };
}

export interface ProjectRegistry {
  add(actor: Actor, path: string, name?: string): Promise<{ project: Project; created: boolean }>;
  list(actor: Actor): Promise<Project[]>;
  /** A project of the caller's tenant, by name or id; another tenant's does not exist. */
  resolve(actor: Actor, ref: string): Promise<Project>;
  byId(id: string): Promise<Project | undefined>;
  remove(actor: Actor, ref: string): Promise<Project>;
}

/** Projects registered on this server: a directory under an allowed root, per tenant. */
export function createProjectRegistry(deps: { pool: Pool; allowRoots: string[]; stacks?: StackBackend }): ProjectRegistry {
  const notFound = (ref: string): AtelierError =>
    new AtelierError(
      'PROJECT_NOT_FOUND',
      `project ${ref} is not registered: run \`atelier projects list\`, or \`atelier projects add PATH\``,
      { project: ref },
    );

  return {
    async add(actor, path, name) {
      if (path.includes('\0') || (name ?? '').includes('\0'))
        throw new AtelierError('INVALID_ARGUMENT', 'path and name may not contain NUL characters', { field: 'path' });
      if (!isAbsolute(path))
        throw new AtelierError('INVALID_ARGUMENT', 'path must be absolute (the CLI sends it resolved)', { field: 'path' });
      if (!existsSync(path)) throw new AtelierError('REPO_NOT_FOUND', `${path} does not exist on the server's machine`, { field: 'path' });
      const real = realpathSync(path);
      if (!statSync(real).isDirectory()) throw new AtelierError('REPO_NOT_FOUND', `${path} is not a directory`, { field: 'path' });
      const roots = deps.allowRoots.filter((r) => existsSync(r)).map((r) => realpathSync(r));
      if (!roots.some((r) => real === r || real.startsWith(r.endsWith(sep) ? r : r + sep)))
        throw new AtelierError(
          'REPO_REFUSED',
          `${real} is outside the directories this server may use (${roots.join(', ') || 'none'}): start the server with --allow-repo-root`,
          { field: 'path' },
        );
      const projectName =
        name ??
        basename(real)
          .toLowerCase()
          .replace(/[^a-z0-9._-]+/g, '-')
          .replace(/^[^a-z0-9]+/, '');
      if (!NAME.test(projectName))
        throw new AtelierError(
          'INVALID_ARGUMENT',
          'a project name is lower-case letters, digits, ., _ and -, at most 63 characters: pass --name',
          {
            field: 'name',
          },
        );
      // The settings file and the git-ignored runtime directory, before the row: a refusal here leaves no project behind.
      let created = false;
      if (readProjectFile(real) === null) {
        writeProjectFile(real, PROJECT_FILE, DEFAULT_PROJECT_FILE);
        created = true;
      }
      ensureActionsDir(real);
      try {
        const r = await deps.pool.query<Row>(
          'INSERT INTO projects (id, tenant_id, name, path, created_by) VALUES ($1, $2, $3, $4, $5) RETURNING *',
          [newId('prj'), actor.tenantId, projectName, real, actor.userId],
        );
        return { project: toProject(r.rows[0]!), created };
      } catch (err) {
        if ((err as { code?: string }).code === '23505')
          throw new AtelierError(
            'ALREADY_EXISTS',
            `a project named ${projectName} or at ${real} is already registered: see \`atelier projects list\``,
            {
              field: 'path',
            },
          );
        throw err;
      }
    },

    async list(actor) {
      const r = await deps.pool.query<Row>('SELECT * FROM projects WHERE tenant_id = $1 ORDER BY name', [actor.tenantId]);
      return r.rows.map(toProject);
    },

    async resolve(actor, ref) {
      if (typeof ref !== 'string' || ref === '' || ref.length > 200 || ref.includes('\0'))
        throw new AtelierError('INVALID_ARGUMENT', 'name the project (--project NAME)', { field: 'project' });
      const r = await deps.pool.query<Row>('SELECT * FROM projects WHERE tenant_id = $1 AND (name = $2 OR id = $2)', [actor.tenantId, ref]);
      if (!r.rows[0]) throw notFound(ref);
      return toProject(r.rows[0]);
    },

    async byId(id) {
      const r = await deps.pool.query<Row>('SELECT * FROM projects WHERE id = $1', [id]);
      return r.rows[0] ? toProject(r.rows[0]) : undefined;
    },

    async remove(actor, ref) {
      const p = await this.resolve(actor, ref);
      // A forgotten project's stacks would run on with nobody to stop them.
      const running = deps.stacks ? STACKS.filter((s) => deps.stacks!.running(p, s)) : [];
      if (running.length > 0)
        throw new AtelierError(
          'CONFLICT',
          `project ${p.name} still runs ${running.join(', ')}: stop it first (atelier actions plan stack.stop --project ${p.name} --param stack=${running[0]})`,
          { project: p.name },
        );
      await deps.pool.query('DELETE FROM projects WHERE id = $1', [p.id]);
      return p;
    },
  };
}
