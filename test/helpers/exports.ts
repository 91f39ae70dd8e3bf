import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';

/**
 * Every name each folder's index.ts exports, read by the TypeScript checker (so `export *`,
 * re-exports and type-only exports count): `name` for values (functions, classes, constants),
 * `type name` for types and interfaces only. Sorted, per folder.
 */
export function folderExports(src: string): Record<string, string[]> {
  const folders = readdirSync(src, { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(join(src, d.name, 'index.ts')))
    .map((d) => d.name)
    .sort();
  const files = folders.map((f) => join(src, f, 'index.ts'));
  const program = ts.createProgram(files, {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    skipLibCheck: true,
    noEmit: true,
    types: ['node'],
  });
  const checker = program.getTypeChecker();
  const out: Record<string, string[]> = {};
  for (const [i, folder] of folders.entries()) {
    const sf = program.getSourceFile(files[i]!);
    const mod = sf && checker.getSymbolAtLocation(sf);
    if (!mod) throw new Error(`src/${folder}/index.ts is not a module`);
    out[folder] = checker
      .getExportsOfModule(mod)
      .map((s) => {
        const target = s.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(s) : s;
        return target.flags & ts.SymbolFlags.Value ? s.name : `type ${s.name}`;
      })
      .sort();
  }
  return out;
}
