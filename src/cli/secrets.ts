import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { readFileCredential, writeFileCredential, type Credential } from '../core/index.js';

/**
 * Where the CLI keeps each context's credential: the OS keyring (macOS Keychain, Windows
 * Credential Manager, the Secret Service on Linux) when one answers, else credentials.json
 * (mode 0600) beside config.yaml, with a one-line notice the first time that file is created.
 * Never config.yaml, never a log line, never a process argument.
 *
 * On Linux only the Secret Service counts as a keyring: the kernel keyring (keyutils) forgets
 * everything at logout, which would log the user out without saying why.
 */
export interface SecretStore {
  get(context: string): Credential | undefined;
  set(context: string, credential: Credential): void;
  /** Removes the credential; true when there was one. */
  delete(context: string): boolean;
}

interface KeyringEntry {
  getPassword(): string | null;
  setPassword(password: string): void;
  deletePassword(): boolean;
}
type EntryClass = new (service: string, account: string, options?: { linux?: { store?: 'secret-service' | 'keyutils' } }) => KeyringEntry;

const SERVICE = 'atelier';

let entryClass: EntryClass | null | undefined;

function loadKeyring(): EntryClass | null {
  if (entryClass !== undefined) return entryClass;
  try {
    // Native module, loaded only when a credential is needed: `atelier --version` never pays for it.
    const require = createRequire(import.meta.url);
    entryClass = (require('@napi-rs/keyring') as { Entry: EntryClass }).Entry;
  } catch {
    entryClass = null;
  }
  return entryClass;
}

function parseCredential(text: string | null): Credential | undefined {
  if (!text) return undefined;
  try {
    const c = JSON.parse(text) as Credential;
    return c && (c.kind === 'api-token' || c.kind === 'oidc') ? c : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The secret store of a config directory. The keyring account names the directory too, so two
 * config directories (a test's, another ATELIER_CONFIG_DIR) never share a context's secret.
 */
export function createSecretStore(configDir: string, notice: (line: string) => void = (l) => process.stderr.write(`${l}\n`)): SecretStore {
  const account = (context: string): string => `${context}@${configDir}`;
  const entry = (context: string): KeyringEntry | null => {
    const Entry = loadKeyring();
    if (!Entry) return null;
    try {
      return new Entry(SERVICE, account(context), process.platform === 'linux' ? { linux: { store: 'secret-service' } } : undefined);
    } catch {
      return null;
    }
  };
  const fileNotice = (): void => {
    if (!existsSync(join(configDir, 'credentials.json')))
      notice(`notice: no OS keyring is available; credentials are stored in ${join(configDir, 'credentials.json')} (mode 0600)`);
  };
  return {
    get(context) {
      // The file first: it holds what the server wrote and what was saved while no keyring answered.
      const fromFile = readFileCredential(configDir, context);
      if (fromFile) return fromFile;
      try {
        return parseCredential(entry(context)?.getPassword() ?? null);
      } catch {
        return undefined;
      }
    },
    set(context, credential) {
      const e = entry(context);
      if (e) {
        try {
          e.setPassword(JSON.stringify(credential));
          // An older copy in the file would shadow the keyring's.
          writeFileCredential(configDir, context, undefined);
          return;
        } catch {
          // no keyring here (headless Linux, a locked store): fall back to the file
        }
      }
      fileNotice();
      writeFileCredential(configDir, context, credential);
    },
    delete(context) {
      const had = readFileCredential(configDir, context) !== undefined;
      writeFileCredential(configDir, context, undefined);
      let inKeyring = false;
      try {
        inKeyring = entry(context)?.deletePassword() ?? false;
      } catch {
        // no keyring: nothing stored there
      }
      return had || inKeyring;
    },
  };
}
