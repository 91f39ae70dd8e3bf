import { useEffect, useState } from 'react';
import { checkApprovalLink, said, type Approval, type LinkCheck } from './api.ts';
import { CATEGORY_LABEL } from './ApprovalsList.tsx';
import { Link } from './router.tsx';

const DID: Record<LinkCheck['action'], string> = {
  approve: 'You followed Approve on a Teams card',
  reject: 'You followed Reject on a Teams card',
  view: 'You followed a Teams card',
};

/**
 * `/approvals/ID?action=…&exp=…&sig=…`: the page a Teams card's button opens (after sign-in, which
 * comes back here). The server checks the link; a good one opens the request's modal, where the
 * person decides with their own rights. The link itself decides nothing; a forged or expired one
 * is refused with the server's words.
 */
export function ApprovalLinkPage({ id, search, onOpen }: { id: string; search: string; onOpen: (a: Approval) => void }) {
  const [state, setState] = useState<{ kind: 'checking' } | { kind: 'ok'; link: LinkCheck } | { kind: 'refused'; text: string }>({
    kind: 'checking',
  });
  useEffect(() => {
    let stop = false;
    setState({ kind: 'checking' });
    checkApprovalLink(id, search).then(
      (link) => {
        if (stop) return;
        setState({ kind: 'ok', link });
        onOpen(link.approval);
      },
      (err: unknown) => {
        if (!stop) setState({ kind: 'refused', text: said(err) });
      },
    );
    return () => {
      stop = true;
    };
    // Checked once per link: onOpen changes at each render of the parent, the link does not.
  }, [id, search]);

  return (
    <section aria-labelledby="link-title">
      <h1 id="link-title">A request from Microsoft Teams</h1>
      {state.kind === 'checking' && <p className="muted">Checking the link…</p>}
      {state.kind === 'refused' && (
        <>
          <p role="alert" className="error" data-testid="link-refused">
            {state.text}
          </p>
          <p>
            <Link to="/">Go to the approvals</Link> · <Link to="/history">Find it in the history</Link>
          </p>
        </>
      )}
      {state.kind === 'ok' && (
        <>
          <p data-testid="link-status">
            {DID[state.link.action]} ({CATEGORY_LABEL[state.link.approval.category]}, workshop <code>{state.link.approval.workshopId}</code>
            ). The request is open: decide it there, with a reason. Nothing was decided by following the link.
          </p>
          <button type="button" onClick={() => onOpen(state.link.approval)}>
            Open the request
          </button>
        </>
      )}
    </section>
  );
}
