import { lazy, Suspense, useCallback, useEffect, useState } from 'react';
import { ApiError, getSession, setCsrf, signOut, switchTenant, type Approval, type Session, type SignedOut } from './api.ts';
import { History } from './History.tsx';
import { Banner } from './Banner.tsx';
import { ApprovalsList } from './ApprovalsList.tsx';
import { ApprovalModal } from './ApprovalModal.tsx';
import { ApprovalLinkPage } from './ApprovalLink.tsx';
import { summary } from './pending.ts';
import { useNow, usePending } from './usePending.ts';
import { Link, usePath } from './router.tsx';
import { WorkshopPage, WorkshopsList } from './Workshops.tsx';

// Its own chunk: the first page does not carry the cockpit.
const Cockpit = lazy(() => import('./Cockpit.tsx').then((m) => ({ default: m.Cockpit })));

export function App() {
  const [session, setSession] = useState<Session | SignedOut>();
  const [problem, setProblem] = useState<string>();

  const load = useCallback(async () => {
    try {
      const s = await getSession();
      setCsrf(s.signedIn ? s.csrf : undefined);
      setSession(s);
      setProblem(undefined);
    } catch (err) {
      setProblem(err instanceof Error ? err.message : String(err));
    }
  }, []);
  useEffect(() => void load(), [load]);

  if (problem)
    return (
      <main className="center">
        <h1>Atelier</h1>
        <p role="alert">The server could not be reached: {problem}</p>
        <button type="button" onClick={() => void load()}>
          Try again
        </button>
      </main>
    );
  if (!session) return <main className="center" aria-busy="true" />;
  if (!session.signedIn) return <SignIn signIn={session.signIn} />;
  return <Dashboard key={session.tenant} session={session} reload={load} />;
}

function decoded(segment: string | undefined): string | undefined {
  try {
    return segment === undefined ? undefined : decodeURIComponent(segment);
  } catch {
    return undefined;
  }
}

function SignIn({ signIn }: { signIn: SignedOut['signIn'] }) {
  const ret = location.pathname + location.search;
  return (
    <main className="center">
      <h1>Atelier</h1>
      <p>Sign in to see and decide the requests of your workshops.</p>
      <a className="button" href={`${signIn.url}?return=${encodeURIComponent(ret)}`}>
        Sign in
      </a>
    </main>
  );
}

function Dashboard({ session, reload }: { session: Session; reload: () => Promise<void> }) {
  const { state, live, error } = usePending(session.tenant, () => void reload());
  const now = useNow();
  // The request shown in the modal: as the live feed last saw it, else as the history read it.
  const [open, setOpen] = useState<{ id: string; seen?: Approval }>();
  const setOpenId = (id: string): void => setOpen({ id });
  const [headerError, setHeaderError] = useState<string>();
  const path = usePath();
  const workshop = decoded(/^\/workshops\/([^/]+)$/.exec(path)?.[1]);
  const linked = decoded(/^\/approvals\/([^/]+)$/.exec(path)?.[1]);
  const signedOut = (): void => void reload();
  const s = summary(state, now);
  const opened = open ? (state.pending.get(open.id) ?? state.ended.get(open.id) ?? open.seen) : undefined;

  const act = async (f: () => Promise<unknown>): Promise<void> => {
    try {
      await f();
      await reload();
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return reload();
      setHeaderError(err instanceof Error ? err.message : String(err));
    }
  };

  return (
    <>
      <a className="skip" href="#main">
        Skip to the page
      </a>
      <Banner count={s.count} soonest={s.soonest} now={now} onReview={() => s.items[0] && setOpenId(s.items[0].id)} />
      <header className="top">
        <strong className="brand">Atelier</strong>
        <nav aria-label="Sections">
          <Link to="/" current={path === '/'}>
            Approvals
          </Link>
          <Link to="/history" current={path === '/history'}>
            History
          </Link>
          <Link to="/workshops" current={path.startsWith('/workshops')}>
            Workshops
          </Link>
          <Link to="/cockpit" current={path === '/cockpit' || path.startsWith('/cockpit/')}>
            Cockpit
          </Link>
        </nav>
        <span className="spacer" />
        {session.tenants.length > 1 ? (
          <label className="tenant">
            Tenant{' '}
            <select value={session.tenant} onChange={(e) => void act(() => switchTenant(e.target.value))}>
              {session.tenants.map((t) => (
                <option key={t.name} value={t.name}>
                  {t.name} ({t.role})
                </option>
              ))}
            </select>
          </label>
        ) : (
          <span className="tenant">{session.tenant}</span>
        )}
        <span className="who" data-testid="who">
          {session.user.name} · {session.role}
        </span>
        <button type="button" className="secondary" onClick={() => void act(signOut)}>
          Sign out
        </button>
      </header>
      {headerError && (
        <p role="alert" className="error">
          {headerError}
        </p>
      )}
      <main className="page" id="main" tabIndex={-1}>
        {path === '/' ? (
          <ApprovalsList items={s.items} now={now} live={live} error={error} onOpen={setOpenId} />
        ) : path === '/history' ? (
          <History onOpen={(a) => setOpen({ id: a.id, seen: a })} onSignedOut={signedOut} />
        ) : path === '/workshops' ? (
          <WorkshopsList role={session.role} onSignedOut={signedOut} />
        ) : path === '/cockpit' || path.startsWith('/cockpit/') ? (
          <Suspense fallback={<p className="muted">Loading the cockpit…</p>}>
            <Cockpit path={path} role={session.role} onSignedOut={signedOut} />
          </Suspense>
        ) : linked !== undefined ? (
          <ApprovalLinkPage id={linked} search={location.search} onOpen={(a) => setOpen({ id: a.id, seen: a })} />
        ) : workshop !== undefined ? (
          <WorkshopPage id={workshop} role={session.role} userId={session.user.id} onSignedOut={signedOut} />
        ) : (
          <section>
            <h1>No such page</h1>
            <p>
              <Link to="/">Go to the approvals</Link>
            </p>
          </section>
        )}
      </main>
      {opened && (
        <ApprovalModal
          key={opened.id}
          approval={opened}
          role={session.role}
          userName={session.user.name}
          now={now}
          onClose={() => setOpen(undefined)}
        />
      )}
    </>
  );
}
