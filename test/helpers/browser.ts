/**
 * A small HTTP "browser" for the sign-in pages: a cookie jar (path-scoped, one origin), redirects
 * followed by hand, and forms read from the HTML and submitted with the fields a person would
 * fill in. No script runs, as in a browser with JavaScript off: the pages must work without it.
 */
export interface Page {
  url: string;
  status: number;
  html: string;
}

export interface Form {
  id: string | undefined;
  method: string;
  action: string;
  /** Named inputs with their current values (hidden ones included). */
  fields: Record<string, string>;
  /** Submit buttons: name → value. */
  buttons: { name: string | undefined; value: string | undefined; text: string }[];
}

interface Cookie {
  name: string;
  value: string;
  path: string;
}

function decode(s: string): string {
  return s
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&amp;/g, '&');
}

function attrs(tag: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const m of tag.matchAll(/([\w:-]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+)))?/g)) {
    out[m[1]!.toLowerCase()] = decode(m[2] ?? m[3] ?? m[4] ?? '');
  }
  return out;
}

export function parseForms(html: string, baseUrl: string): Form[] {
  const forms: Form[] = [];
  for (const m of html.matchAll(/<form\b([^>]*)>([\s\S]*?)<\/form>/gi)) {
    const a = attrs(m[1]!);
    const inner = m[2]!;
    const fields: Record<string, string> = {};
    for (const i of inner.matchAll(/<input\b([^>]*)>/gi)) {
      const ia = attrs(i[1]!);
      if (ia.name && ia.type !== 'submit') fields[ia.name] = ia.value ?? '';
    }
    const buttons: Form['buttons'] = [];
    for (const b of inner.matchAll(/<button\b([^>]*)>([\s\S]*?)<\/button>/gi)) {
      const ba = attrs(b[1]!);
      if ((ba.type ?? 'submit') === 'submit') buttons.push({ name: ba.name, value: ba.value, text: b[2]!.replace(/<[^>]+>/g, '').trim() });
    }
    forms.push({ id: a.id, method: (a.method ?? 'get').toUpperCase(), action: new URL(a.action ?? '', baseUrl).href, fields, buttons });
  }
  return forms;
}

/** The visible text of a page, tags removed, whitespace collapsed. */
export function textOf(html: string): string {
  return decode(
    html
      .replace(/<(script|style)\b[\s\S]*?<\/\1>/gi, ' ')
      .replace(/<[^>]+>/g, ' ')
      .replace(/\s+/g, ' '),
  ).trim();
}

export class Browser {
  private jar: Cookie[] = [];
  /** Every URL visited, in order (redirects included). */
  readonly history: string[] = [];

  private cookieHeader(url: URL): string {
    return this.jar
      .filter((c) => url.pathname === c.path || url.pathname.startsWith(c.path.endsWith('/') ? c.path : `${c.path}/`) || c.path === '/')
      .sort((a, b) => b.path.length - a.path.length)
      .map((c) => `${c.name}=${c.value}`)
      .join('; ');
  }

  private store(url: URL, setCookies: string[]): void {
    for (const line of setCookies) {
      const [pair, ...opts] = line.split(';').map((s) => s.trim());
      const eq = pair!.indexOf('=');
      const name = pair!.slice(0, eq);
      const value = pair!.slice(eq + 1);
      let path = url.pathname.replace(/\/[^/]*$/, '') || '/';
      let expired = value === '';
      for (const o of opts) {
        const [k, v = ''] = o.split('=');
        if (k!.toLowerCase() === 'path') path = v;
        if (k!.toLowerCase() === 'expires' && new Date(v).getTime() < Date.now()) expired = true;
        if (k!.toLowerCase() === 'max-age' && Number(v) <= 0) expired = true;
      }
      this.jar = this.jar.filter((c) => !(c.name === name && c.path === path));
      if (!expired) this.jar.push({ name, value, path });
    }
  }

  /** Forgets every cookie (a new browser profile). */
  clear(): void {
    this.jar = [];
  }

  async request(method: string, url: string, form?: Record<string, string>): Promise<Page> {
    let current = new URL(url);
    let body: string | undefined = form ? new URLSearchParams(form).toString() : undefined;
    for (let hops = 0; hops < 20; hops++) {
      this.history.push(current.href);
      const headers: Record<string, string> = { accept: 'text/html' };
      const cookie = this.cookieHeader(current);
      if (cookie) headers.cookie = cookie;
      if (body !== undefined) headers['content-type'] = 'application/x-www-form-urlencoded';
      const res = await fetch(current, { method, headers, body, redirect: 'manual' });
      this.store(current, res.headers.getSetCookie());
      const location = res.headers.get('location');
      if (res.status >= 300 && res.status < 400 && location) {
        await res.arrayBuffer();
        current = new URL(location, current);
        method = 'GET';
        body = undefined;
        continue;
      }
      return { url: current.href, status: res.status, html: await res.text() };
    }
    throw new Error(`too many redirects from ${url}`);
  }

  get(url: string): Promise<Page> {
    return this.request('GET', url);
  }

  /**
   * Submits a form of `page` (by id, else the first), with `fields` typed in and `button` (its
   * visible text) pressed; the pressed button's name=value is sent, as a browser does.
   */
  submit(page: Page, opts: { form?: string; fields?: Record<string, string>; button?: string } = {}): Promise<Page> {
    const forms = parseForms(page.html, page.url);
    const form = opts.form === undefined ? forms[0] : forms.find((f) => f.id === opts.form);
    if (!form) throw new Error(`no form ${opts.form ?? ''} on ${page.url}:\n${textOf(page.html)}`);
    const data: Record<string, string> = { ...form.fields, ...opts.fields };
    if (opts.button !== undefined) {
      const b = form.buttons.find((x) => x.text === opts.button);
      if (!b) throw new Error(`no button "${opts.button}" in form ${form.id ?? ''}: ${form.buttons.map((x) => x.text).join(', ')}`);
      if (b.name) data[b.name] = b.value ?? '';
    }
    return this.request(form.method, form.action, data);
  }
}
