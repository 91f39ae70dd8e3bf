import { useMemo } from 'react';
import { Diff, Hunk, parseDiff, type FileData } from 'react-diff-view';
import 'react-diff-view/style/index.css';
import { visible } from './ApprovalsList.tsx';

/**
 * One file of a diff side by side (old on the left, new on the right, with line numbers), drawn
 * by react-diff-view (its own chunk: loaded only when someone asks for this view). It renders
 * text as React text nodes, never as HTML; the lines are passed through `visible` first, so
 * control and bidi characters are shown as code points here as everywhere else. `lines` is the
 * file's part of the diff after its `diff --git` line (paged by the caller); what git's format
 * does not parse (a hostile or cut diff) is answered by `fallback`, the unified view.
 */
export default function SplitDiff({ lines, fallback }: { lines: string[]; fallback: React.ReactNode }) {
  const file = useMemo<FileData | undefined>(() => {
    try {
      // A header of the parser's own: the file's name is shown by the caller, never parsed from agent text.
      return parseDiff(`diff --git a/file b/file\n${lines.map(visible).join('\n')}\n`)[0];
    } catch {
      return undefined;
    }
  }, [lines]);
  if (!file || file.hunks.length === 0) return <>{fallback}</>;
  return (
    <div className="split-diff" data-testid="split-diff">
      <Diff viewType="split" diffType={file.type} hunks={file.hunks}>
        {(hunks) => hunks.map((h) => <Hunk key={`${h.oldStart}-${h.newStart}-${h.content}`} hunk={h} />)}
      </Diff>
    </div>
  );
}
