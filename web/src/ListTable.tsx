import type { ReactNode } from 'react';

/**
 * A list read from the server, in one of its states: its error (as text, in an alert), "Loading…"
 * while `items` is undefined, `empty` when there is nothing, else the table with one header cell
 * per column and a row per item (`row` gives the whole `<tr>`, keyed).
 */
export function ListTable<T>({
  items,
  error,
  empty,
  testId,
  columns,
  row,
  scrollLabel,
}: {
  items: readonly T[] | undefined;
  error?: string | undefined;
  empty: ReactNode;
  testId: string;
  columns: readonly ReactNode[];
  row: (item: T) => ReactNode;
  /**
   * For a table wider than a narrow screen: its box becomes a labelled region the keyboard can
   * focus and scroll, even when nothing inside it is focusable.
   */
  scrollLabel?: string;
}) {
  return (
    <>
      {error && (
        <p role="alert" className="error">
          {error}
        </p>
      )}
      {!items ? (
        <p className="muted">Loading…</p>
      ) : items.length === 0 ? (
        empty
      ) : (
        <div className="table-wrap" {...(scrollLabel ? { tabIndex: 0, role: 'region', 'aria-label': scrollLabel } : {})}>
          <table data-testid={testId}>
            <thead>
              <tr>
                {columns.map((c, i) => (
                  <th key={i} scope="col">
                    {c}
                  </th>
                ))}
              </tr>
            </thead>
            <tbody>{items.map(row)}</tbody>
          </table>
        </div>
      )}
    </>
  );
}
