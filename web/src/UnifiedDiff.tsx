import { visible } from './ApprovalsList.tsx';

/**
 * Lines of a unified diff as text: added lines on the add colour, removed ones on the delete
 * colour (file headers `+++`/`---` not), control and bidi characters shown as code points. The
 * approvals modal and the cockpit's plan both draw their diffs with it.
 */
export function UnifiedDiff({ lines, testId }: { lines: readonly string[]; testId: string }) {
  return (
    <pre className="code unified-diff" data-testid={testId}>
      {lines.map((l, i) => (
        <span
          key={i}
          className={l.startsWith('+') && !l.startsWith('+++') ? 'add' : l.startsWith('-') && !l.startsWith('---') ? 'del' : undefined}
        >
          {visible(l)}
          {'\n'}
        </span>
      ))}
    </pre>
  );
}
