// Copies non-TypeScript assets (SQL migrations) next to the compiled code.
import { cpSync } from 'node:fs';
cpSync('src/db/migrations', 'dist/db/migrations', { recursive: true });
