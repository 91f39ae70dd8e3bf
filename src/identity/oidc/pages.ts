/**
 * The issuer's own pages: plain server-rendered HTML, no script, one stylesheet inline. Every
 * value placed in a page goes through `esc`.
 */
export function esc(value: unknown): string {
  return String(value ?? '')
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

const STYLE = `body{font-family:system-ui,sans-serif;background:#f4f4f5;color:#18181b;margin:0;padding:40px 16px}
main{max-width:380px;margin:0 auto;background:#fff;border-radius:8px;box-shadow:0 1px 3px rgba(0,0,0,.15);padding:24px 28px}
h1{font-size:1.3em;margin:0 0 16px}label{display:block;margin:12px 0 4px;font-size:.9em}
input[type=text],input[type=password]{width:100%;box-sizing:border-box;padding:8px;font-size:1em;border:1px solid #a1a1aa;border-radius:4px}
button{margin-top:16px;padding:8px 14px;font-size:1em;border-radius:4px;border:1px solid #3f3f46;background:#27272a;color:#fff;cursor:pointer}
button.secondary{background:#fff;color:#27272a}.error{color:#b91c1c;font-weight:600}.notice{color:#3f3f46}
code.usercode{font-size:1.6em;letter-spacing:.1em}ul{padding-left:20px}`;

export interface Page {
  title: string;
  /** Trusted HTML: build it with `esc` for every value. */
  body: string;
}

export function layout({ title, body }: Page): string {
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer"><title>${esc(title)} · Atelier</title><style>${STYLE}</style></head>
<body><main><h1>${esc(title)}</h1>
${body}
</main></body></html>`;
}

/** Headers for every page: no caching, no framing, no script. */
export const PAGE_HEADERS = {
  'content-type': 'text/html; charset=utf-8',
  'cache-control': 'no-store',
  'x-frame-options': 'DENY',
  'content-security-policy': "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
} as const;

export function message(kind: 'error' | 'notice', text: string | undefined): string {
  return text ? `<p class="${kind}" role="${kind === 'error' ? 'alert' : 'status'}">${esc(text)}</p>` : '';
}

export function hidden(fields: Record<string, string>): string {
  return Object.entries(fields)
    .map(([k, v]) => `<input type="hidden" name="${esc(k)}" value="${esc(v)}">`)
    .join('');
}

export function loginPage(o: {
  action: string;
  abortAction: string;
  csrf: string;
  clientName: string;
  username?: string;
  error?: string;
}): Page {
  return {
    title: 'Sign in to Atelier',
    body: `<p class="notice">${esc(o.clientName)} asks to act as you.</p>
${message('error', o.error)}
<form method="post" action="${esc(o.action)}" id="login">${hidden({ csrf: o.csrf })}
<label for="username">User name</label><input type="text" id="username" name="username" autocomplete="username" autocapitalize="none" value="${esc(o.username ?? '')}" required${o.username ? '' : ' autofocus'}>
<label for="password">Password</label><input type="password" id="password" name="password" autocomplete="current-password" required${o.username ? ' autofocus' : ''}>
<button type="submit">Sign in</button></form>
<form method="post" action="${esc(o.abortAction)}" id="abort">${hidden({ csrf: o.csrf })}<button type="submit" class="secondary">Cancel</button></form>`,
  };
}

export function changePasswordPage(o: { action: string; csrf: string; change: string; username: string; error?: string }): Page {
  return {
    title: 'Choose a new password',
    body: `<p class="notice">${esc(o.username)}, your password was set by an administrator: choose your own before going on.
At least 12 characters, not containing your user name.</p>
${message('error', o.error)}
<form method="post" action="${esc(o.action)}" id="change-password">${hidden({ csrf: o.csrf, change: o.change })}
<input type="text" name="username" value="${esc(o.username)}" autocomplete="username" hidden readonly>
<label for="password">New password</label><input type="password" id="password" name="password" autocomplete="new-password" minlength="12" required autofocus>
<label for="confirm">New password again</label><input type="password" id="confirm" name="confirm" autocomplete="new-password" minlength="12" required>
<button type="submit">Save and continue</button></form>`,
  };
}

export function consentPage(o: { action: string; csrf: string; clientName: string; userName: string; scopes: string[] }): Page {
  const described: Record<string, string> = {
    openid: 'know who you are (your user id)',
    profile: 'see your name and user name',
    email: 'see your email address',
    offline_access: 'stay signed in (refresh its access without asking you again)',
  };
  const items = o.scopes.map((s) => `<li>${esc(described[s] ?? s)}</li>`).join('');
  return {
    title: 'Allow access?',
    body: `<p><strong>${esc(o.clientName)}</strong> wants to act as <strong>${esc(o.userName)}</strong> on this Atelier server, with your role. It asks to:</p>
<ul>${items}<li>call the Atelier API on your behalf</li></ul>
<form method="post" action="${esc(o.action)}" id="consent">${hidden({ csrf: o.csrf })}
<button type="submit" name="decision" value="allow">Allow</button>
<button type="submit" name="decision" value="deny" class="secondary">Deny</button></form>`,
  };
}

export function userCodePage(o: { action: string; xsrf: string; userCode?: string; error?: string; notice?: string }): Page {
  return {
    title: 'Connect a device',
    body: `${o.error ? message('error', o.error) : message('notice', o.notice ?? 'Type the code your terminal shows.')}
<form method="post" action="${esc(o.action)}" id="user-code">${hidden({ xsrf: o.xsrf })}
<label for="user_code">Code</label><input type="text" id="user_code" name="user_code" value="${esc(o.userCode ?? '')}" autocomplete="off" autocapitalize="characters" spellcheck="false" required autofocus>
<button type="submit">Continue</button></form>`,
  };
}

export function confirmCodePage(o: { action: string; xsrf: string; userCode: string; clientName: string; requestedFrom?: string }): Page {
  return {
    title: 'Is this your device?',
    body: `<p><strong>${esc(o.clientName)}</strong> wants to sign in${o.requestedFrom ? ` (requested from ${esc(o.requestedFrom)})` : ''}.</p>
<p>Check that your terminal shows this code:</p><p><code class="usercode">${esc(o.userCode)}</code></p>
<p class="notice">If you did not start this sign-in, or the code differs, cancel.</p>
<form method="post" action="${esc(o.action)}" id="confirm">${hidden({ xsrf: o.xsrf, user_code: o.userCode })}
<button type="submit" name="confirm" value="yes">Continue</button>
<button type="submit" name="abort" value="yes" class="secondary">Cancel</button></form>`,
  };
}

export function infoPage(title: string, text: string, kind: 'error' | 'notice' = 'notice', link?: { href: string; text: string }): Page {
  return { title, body: `${message(kind, text)}${link ? `<p><a href="${esc(link.href)}">${esc(link.text)}</a></p>` : ''}` };
}
