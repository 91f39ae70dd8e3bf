import { useEffect, useState, type MouseEvent, type ReactNode } from 'react';

/** The app's pages live in the URL's path (the server answers every page with the app). */
export function usePath(): string {
  const [path, setPath] = useState(location.pathname);
  useEffect(() => {
    const on = (): void => setPath(location.pathname);
    addEventListener('popstate', on);
    addEventListener('atelier:navigate', on);
    return () => {
      removeEventListener('popstate', on);
      removeEventListener('atelier:navigate', on);
    };
  }, []);
  return path;
}

export function navigate(to: string): void {
  history.pushState(null, '', to);
  dispatchEvent(new Event('atelier:navigate'));
  scrollTo(0, 0);
  // Keyboard and screen-reader users start on the new page, not on the link left behind.
  document.getElementById('main')?.focus({ preventScroll: true });
}

/** A link that changes page without reloading the app (a modified click opens a tab as usual). */
export function Link({ to, children, current }: { to: string; children: ReactNode; current?: boolean }) {
  const onClick = (e: MouseEvent<HTMLAnchorElement>): void => {
    if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
  };
  return (
    <a href={to} onClick={onClick} aria-current={current ? 'page' : undefined}>
      {children}
    </a>
  );
}
