/**
 * xterm.js draws its terminal with <style> elements it makes itself, which the page's CSP
 * (`style-src 'self'`, no 'unsafe-inline') refuses unless they carry the nonce the server put
 * in this page's CSP and in its `atelier-style-nonce` meta tag (a new one for every load of
 * index.html). Every <style> this document creates gets that nonce before it is inserted (a
 * nonce set later is not honoured). Styles from data are never written: React renders text.
 */
const meta = document.querySelector<HTMLMetaElement>('meta[name="atelier-style-nonce"]');
const nonce = meta?.content;
if (nonce && !nonce.startsWith('__')) {
  const create = document.createElement.bind(document) as (tag: string, options?: ElementCreationOptions) => HTMLElement;
  document.createElement = ((tag: string, options?: ElementCreationOptions) => {
    const el = create(tag, options);
    if (tag.toLowerCase() === 'style') el.nonce = nonce;
    return el;
  }) as typeof document.createElement;
}
