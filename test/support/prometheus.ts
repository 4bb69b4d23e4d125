// Reads one sample from Prometheus text format.

/** The value of one series, written exactly as exposed, e.g. `edge_limiter_decisions_total{policy="p",op="take",outcome="allowed"}`. */
export function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}
