import { execFileSync } from 'node:child_process';
import { chownSync, mkdtempSync, rmSync, mkdirSync, appendFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A separate PostgreSQL cluster for "external database" tests: its own initdb, its own unix
 * socket, run as the `postgres` user (PostgreSQL refuses root).
 */
export class ExternalPostgres {
  private constructor(
    readonly dir: string,
    readonly bin: string,
  ) {}

  static start(): ExternalPostgres {
    const base = '/usr/lib/postgresql';
    const version = readdirSync(base).sort((a, b) => Number(b) - Number(a))[0]!;
    const bin = join(base, version, 'bin');
    const dir = mkdtempSync('/tmp/atelier-extpg-');
    chownSync(dir, uid(), gid());
    const pg = new ExternalPostgres(dir, bin);
    pg.asPostgres(join(bin, 'initdb'), [
      '-D',
      join(dir, 'data'),
      '-U',
      'tester',
      '--auth=trust',
      '--no-sync',
      '--no-locale',
      '--encoding=UTF8',
    ]);
    mkdirSync(join(dir, 'sock'));
    chownSync(join(dir, 'sock'), uid(), gid());
    appendFileSync(
      join(dir, 'data', 'postgresql.conf'),
      `\nlisten_addresses = ''\nunix_socket_directories = '${join(dir, 'sock')}'\nfsync = off\n`,
    );
    pg.asPostgres(join(bin, 'pg_ctl'), ['-D', join(dir, 'data'), '-l', join(dir, 'log'), '-w', 'start']);
    pg.asPostgres(join(bin, 'createdb'), ['-h', join(dir, 'sock'), '-U', 'tester', 'atelier_ext']);
    return pg;
  }

  get url(): string {
    return `postgresql://tester@/atelier_ext?host=${encodeURIComponent(join(this.dir, 'sock'))}`;
  }

  stop(): void {
    try {
      this.asPostgres(join(this.bin, 'pg_ctl'), ['-D', join(this.dir, 'data'), '-m', 'immediate', 'stop']);
    } finally {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }

  private asPostgres(cmd: string, args: string[]): void {
    execFileSync(cmd, args, { uid: uid(), gid: gid(), cwd: '/', stdio: 'ignore' });
  }
}

function uid(): number {
  return Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
}
function gid(): number {
  return Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
}
