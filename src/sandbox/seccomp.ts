import { execFileSync } from 'node:child_process';
import { chmodSync, copyFileSync, existsSync, renameSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ERRNO, PROFILE, type ArgRule, type SeccompProfile } from './seccompProfile.js';
import { X86_64_SYSCALLS } from './seccompSyscalls.js';

/**
 * Why a loader in the command line, and not `bwrap --seccomp FD`: bwrap's option covers only the
 * sandbox's first process, while every exec, PTY, agent session and SSH channel enters the
 * sandbox later with nsenter and inherits nothing from it. One small static loader
 * (seccomp-exec.c) serves all of them, the rootless `unshare` sandboxes and the simulators alike,
 * at the cost of one exec (~0.2 ms). The filter is compiled here, from the profile table, to
 * classic BPF at build time (scripts/build-seccomp.mjs), so no libseccomp is needed to build or
 * run it.
 */

/** Where the loader is inside every sandbox built from the mount plan (bound read-only from the host). */
export const SECCOMP_EXEC = '/run/seccomp-exec';

/** The loader's path on the host: beside the compiled code (dist/sandbox), also when run from src/ or the CLI bundle. */
export function seccompLoaderPath(): string {
  const candidates = [new URL('../sandbox/seccomp-exec', import.meta.url), new URL('../../dist/sandbox/seccomp-exec', import.meta.url)];
  const found = candidates.find((u) => existsSync(u)) ?? candidates[0]!;
  return fileURLToPath(found);
}

/**
 * The program that enters a running sandbox with the filter (sandbox-enter.c, built beside the
 * loader with the same filter): run from the host, so used where it was built.
 */
export function sandboxEnterPath(): string {
  return join(dirname(seccompLoaderPath()), 'sandbox-enter');
}

/**
 * Copies the loader to `dest` (a sandbox's own directory, bound read-only at SECCOMP_EXEC inside):
 * a bind from the host's install would show its path in the sandbox's /proc/self/mountinfo.
 * Written beside and renamed, so a running copy is never overwritten in place; done at every
 * sandbox start, so a rebuilt loader (a new profile) reaches every workshop that starts again.
 */
export function installLoader(dest: string): void {
  const tmp = `${dest}.new`;
  copyFileSync(seccompLoaderPath(), tmp);
  chmodSync(tmp, 0o755);
  renameSync(tmp, dest);
}

/**
 * `argv` run under the system-call filter, for a process in a sandbox's mount namespace (the
 * loader is at SECCOMP_EXEC there). Put it before the privilege drop: the filter then holds
 * before the process becomes the workshop's uid.
 */
export function seccompWrap(argv: string[]): string[] {
  return [SECCOMP_EXEC, ...argv];
}

/** The same for a process that stays in the host's mount namespace (the server's helpers that enter only a network namespace). */
export function seccompWrapOnHost(argv: string[]): string[] {
  return [seccompLoaderPath(), ...argv];
}

// Classic BPF, as the kernel's seccomp reads it (linux/filter.h, linux/seccomp.h, linux/audit.h).
const LD_W_ABS = 0x20;
const JMP_JEQ_K = 0x15;
const JMP_JGE_K = 0x35;
const JMP_JA = 0x05;
const JMP_JSET_K = 0x45;
const RET_K = 0x06;
const RET_ALLOW = 0x7fff0000;
const retErrno = (errno: number): number => 0x00050000 | errno;
const AUDIT_ARCH_X86_64 = 0xc000003e;
/** System calls of the x32 ABI carry this bit in their number. */
const X32_SYSCALL_BIT = 0x40000000;
// struct seccomp_data: nr, arch, instruction pointer, then six 64-bit arguments (little-endian:
// the lower half first).
const OFFSET_NR = 0;
const OFFSET_ARCH = 4;
const argLow = (i: number): number => 16 + 8 * i;

export interface BpfInstruction {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

/** Every system call of the table, with what the profile does with it; throws on a name unknown, missing or named twice. */
export function classify(
  profile: SeccompProfile = PROFILE,
  table: Readonly<Record<string, number>> = X86_64_SYSCALLS,
): Map<string, string> {
  const seen = new Map<string, string>();
  const add = (name: string, how: string): void => {
    if (!(name in table)) throw new Error(`seccomp profile ${profile.name}: ${name} is not an ${profile.arch} system call`);
    const before = seen.get(name);
    if (before) throw new Error(`seccomp profile ${profile.name}: ${name} is both ${before} and ${how}`);
    seen.set(name, how);
  };
  for (const name of profile.allowed) add(name, 'allowed');
  for (const rule of profile.byArgument) add(rule.name, 'allowed by argument');
  for (const family of profile.refused) for (const name of family.names) add(name, `refused (${family.family})`);
  const missing = Object.keys(table).filter((n) => !seen.has(n));
  if (missing.length > 0) throw new Error(`seccomp profile ${profile.name}: not classified: ${missing.join(', ')}`);
  return seen;
}

function argBlock(rule: ArgRule): BpfInstruction[] {
  const i = (code: number, k: number, jt = 0, jf = 0): BpfInstruction => ({ code, jt, jf, k });
  const load = i(LD_W_ABS, argLow(rule.arg));
  const allow = i(RET_K, RET_ALLOW);
  const deny = i(RET_K, retErrno(ERRNO.EPERM));
  switch (rule.allowIf) {
    case 'noBitsOf':
      return [load, i(JMP_JSET_K, rule.mask >>> 0, 0, 1), deny, allow];
    case 'notIn': {
      // Each match jumps to the refusal after the allow: n - index instructions ahead.
      const n = rule.values.length;
      return [load, ...rule.values.map((v, idx) => i(JMP_JEQ_K, v >>> 0, n - idx, 0)), allow, deny];
    }
    case 'in': {
      const n = rule.values.length;
      return [load, ...rule.values.map((v, idx) => i(JMP_JEQ_K, v >>> 0, n - idx, 0)), deny, allow];
    }
  }
}

/** What the program does for a range of system-call numbers. */
type Verdict = { ret: number } | { rule: ArgRule };
interface Range {
  lo: number;
  hi: number;
  verdict: Verdict;
}

/** The profile as ranges of numbers with one verdict each, from 0 to the last number below the x32 bit. */
function ranges(profile: SeccompProfile, table: Readonly<Record<string, number>>): Range[] {
  const byNr = new Map<number, Verdict>();
  for (const name of profile.allowed) byNr.set(table[name]!, { ret: RET_ALLOW });
  for (const rule of profile.byArgument) byNr.set(table[rule.name]!, { rule });
  for (const family of profile.refused)
    for (const name of family.names) byNr.set(table[name]!, { ret: retErrno(ERRNO[family.errno ?? 'EPERM']) });
  const last = Math.max(...Object.values(table));
  const out: Range[] = [];
  const push = (nr: number, verdict: Verdict, hi = nr): void => {
    const prev = out.at(-1);
    if (prev && 'ret' in prev.verdict && 'ret' in verdict && prev.verdict.ret === verdict.ret) prev.hi = hi;
    else out.push({ lo: nr, hi, verdict });
  };
  // A gap in the table is a number Linux never gave out: refused like the rest.
  for (let nr = 0; nr <= last; nr++) push(nr, byNr.get(nr) ?? { ret: retErrno(ERRNO.EPERM) });
  // Newer than the profile: ENOSYS, as a kernel without the call would answer.
  push(last + 1, { ret: retErrno(ERRNO.ENOSYS) }, X32_SYSCALL_BIT - 1);
  return out;
}

function verdictCode(v: Verdict): BpfInstruction[] {
  return 'ret' in v ? [{ code: RET_K, jt: 0, jf: 0, k: v.ret >>> 0 }] : argBlock(v.rule);
}

/** A binary search over the ranges (the accumulator holds the number): about eight tests per call. */
function search(rs: Range[]): BpfInstruction[] {
  if (rs.length === 1) return verdictCode(rs[0]!.verdict);
  const mid = rs.length >> 1;
  const left = search(rs.slice(0, mid));
  const right = search(rs.slice(mid));
  const k = rs[mid]!.lo;
  // number >= k: the right half, right after the test; else the left half, after it. A skip
  // longer than a conditional jump's 8 bits goes through an unconditional one (32 bits).
  if (right.length <= 255) return [{ code: JMP_JGE_K, jt: 0, jf: right.length, k }, ...right, ...left];
  return [{ code: JMP_JGE_K, jt: 1, jf: 0, k }, { code: JMP_JA, jt: 0, jf: 0, k: right.length }, ...right, ...left];
}

/**
 * The profile as a BPF program: the ABI checks, then a binary search over ranges of system-call
 * numbers. A search rather than a list of tests: installing a filter, the kernel runs it once for
 * every number to cache the verdicts that do not depend on arguments, so a ~600-step list made
 * every exec ~0.5 ms slower; calls checked by argument (clone, socket, personality) are not
 * cached and run the program, a dozen steps.
 */
export function compileFilter(
  profile: SeccompProfile = PROFILE,
  table: Readonly<Record<string, number>> = X86_64_SYSCALLS,
): BpfInstruction[] {
  classify(profile, table);
  const p: BpfInstruction[] = [];
  const emit = (code: number, k: number, jt = 0, jf = 0): void => void p.push({ code, jt, jf, k: k >>> 0 });
  emit(LD_W_ABS, OFFSET_ARCH);
  emit(JMP_JEQ_K, AUDIT_ARCH_X86_64, 1, 0);
  emit(RET_K, retErrno(ERRNO.EPERM)); // i386 (int 0x80) and any other ABI
  emit(LD_W_ABS, OFFSET_NR);
  emit(JMP_JGE_K, X32_SYSCALL_BIT, 0, 1);
  emit(RET_K, retErrno(ERRNO.EPERM)); // x32
  p.push(...search(ranges(profile, table)));
  if (p.length > 4096) throw new Error(`seccomp profile ${profile.name}: ${p.length} BPF instructions, the kernel takes 4096`);
  return p;
}

/** The C header the loader is built with (scripts/build-seccomp.mjs). */
export function filterHeader(profile: SeccompProfile = PROFILE): string {
  const rows = compileFilter(profile).map(
    (x) => `  { 0x${x.code.toString(16).padStart(2, '0')}, ${x.jt}, ${x.jf}, 0x${x.k.toString(16).padStart(8, '0')} },`,
  );
  return [
    `/* Generated by scripts/build-seccomp.mjs from src/sandbox/seccompProfile.ts (${profile.name}): do not edit. */`,
    '#include <linux/filter.h>',
    `static struct sock_filter ATELIER_FILTER[] = {`,
    ...rows,
    '};',
    '',
  ].join('\n');
}

/** What the filter is, in numbers, for the server's start-up line. */
export interface SeccompSummary {
  profile: string;
  arch: string;
  rules: number;
  allowed: number;
  byArgument: number;
  refused: number;
  instructions: number;
}

export function seccompSummary(profile: SeccompProfile = PROFILE): SeccompSummary {
  const classes = [...classify(profile).values()];
  return {
    profile: profile.name,
    arch: profile.arch,
    rules: classes.length,
    allowed: classes.filter((c) => c === 'allowed').length,
    byArgument: classes.filter((c) => c === 'allowed by argument').length,
    refused: classes.filter((c) => c.startsWith('refused')).length,
    instructions: compileFilter(profile).length,
  };
}

/**
 * Checks at server start that the loader is built and that this kernel takes the filter (it runs
 * `true` under it); throws with what to do otherwise. Workshops never start without it.
 */
export function checkSeccomp(): SeccompSummary {
  if (process.arch !== 'x64') throw new Error(`the system-call filter exists for x86_64 only; this host is ${process.arch}`);
  const loader = seccompLoaderPath();
  if (!existsSync(loader)) {
    throw new Error(
      `the system-call filter loader is not built (${loader}): run \`npm run build\` (it needs a C compiler: apt-get install gcc libc6-dev)`,
    );
  }
  if (!existsSync(sandboxEnterPath())) {
    throw new Error(
      `the sandbox entry is not built (${sandboxEnterPath()}): run \`npm run build\` (it needs a C compiler: apt-get install gcc libc6-dev)`,
    );
  }
  try {
    execFileSync(loader, ['/bin/true'], { stdio: ['ignore', 'ignore', 'pipe'], timeout: 10_000 });
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim();
    throw new Error(`the system-call filter does not load on this kernel: ${stderr || (err as Error).message}`);
  }
  return seccompSummary();
}
