/* Chart helpers over uPlot: a ring buffer of samples, stacked areas, lines with an SLO.
 * The history lives here, in the page (ADR 0080): one array per series, trimmed to
 * HISTORY_S seconds. Each chart marks its element with data-points (how many
 * non-empty values it drew) so a test can see that it drew data, not just a canvas. */
"use strict";

const SluiceCharts = (() => {
  const HISTORY_S = 300;
  const AXIS = { stroke: "#8594a8", grid: { stroke: "#1c2430", width: 1 }, ticks: { stroke: "#243040", width: 1 } };
  // Whole numbers only on count axes (jobs, replicas): no "0, 1, 1, 2" ticks.
  const COUNT_INCRS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6, 1e7];
  const TIME_INCRS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600];
  const BUCKET_COLORS = ["#2f81f7", "#a371f7", "#db6d28", "#3fb950", "#e3b341", "#f778ba", "#39c5cf", "#8b949e"];

  class Ring {
    constructor(names) {
      this.t = [];
      this.cols = Object.fromEntries(names.map((n) => [n, []]));
    }
    push(tS, values) {
      if (this.t.length && tS <= this.t[this.t.length - 1]) return false;  // same refresh
      this.t.push(tS);
      for (const [name, col] of Object.entries(this.cols)) col.push(values[name] ?? null);
      while (this.t.length && this.t[0] < tS - HISTORY_S) {
        this.t.shift();
        for (const col of Object.values(this.cols)) col.shift();
      }
      return true;
    }
    col(name) { return this.cols[name]; }
  }

  function countPoints(data, nSeries) {
    let n = 0;
    for (let i = 1; i <= nSeries; i++) for (const v of data[i]) if (v !== null && v !== undefined) n++;
    return n;
  }

  function fmt(v, unit) {
    if (v === null || v === undefined || Number.isNaN(v)) return "–";
    if (unit === "ms") return v >= 1000 ? (v / 1000).toFixed(v >= 10000 ? 0 : 1) + " s" : Math.round(v) + " ms";
    if (unit === "/s") return (v >= 100 ? Math.round(v) : v > 0 && v < 1 ? v.toFixed(2) : v.toFixed(1)) + "/s";
    return Math.round(v).toLocaleString();
  }

  /* A uPlot that follows its element's width; `update(data)` redraws and counts. */
  function mount(el, opts) {
    const width = () => Math.max(200, el.clientWidth);
    const height = opts.height || 190;
    const base = {
      width: width(), height,
      cursor: { drag: { x: false, y: false }, points: { size: 6 } },
      legend: { live: true },
    };
    const plot = new uPlot({ ...base, ...opts }, opts.data, el);
    let last = 0;
    new ResizeObserver(() => {
      const w = width();
      if (w !== last) { last = w; plot.setSize({ width: w, height }); }
    }).observe(el);
    return {
      plot,
      update(data, nSeries) {  // the first nSeries after x are data (not an SLO line)
        plot.setData(data);
        // Not hovering: the legend shows the latest values, so it doubles as a readout.
        if (plot.cursor.left < 0 && data[0].length && plot.setLegend) plot.setLegend({ idx: data[0].length - 1 });
        el.dataset.points = String(countPoints(data, nSeries ?? data.length - 1));
      },
    };
  }

  /* Buckets stacked: each series is drawn as the running total, widest first, with
   * opaque fills so each visible band is one bucket; the legend shows the bucket's own value. */
  function stacked(el, buckets, unit) {
    const order = [...buckets].reverse();  // top of the stack first: drawn first, then covered
    let raw = [];
    const series = [{}].concat(order.map((b, i) => {
      const color = BUCKET_COLORS[(buckets.length - 1 - i) % BUCKET_COLORS.length];
      return {
        label: "≤ " + b, stroke: color, fill: color + "cc", width: 1, points: { show: false },
        value: (u, v, si, idx) => (idx === null || !raw[si] ? "–" : fmt(raw[si][idx], unit)),
      };
    }));
    const chart = mount(el, {
      series, data: [[], ...order.map(() => [])],
      axes: [timeAxis(), { ...AXIS, size: 64, incrs: COUNT_INCRS, values: (u, t) => t.map((v) => fmt(v, unit)) }],
      scales: { x: { time: true }, y: { range: (u, lo, hi) => [0, Math.max(1, hi * 1.1)] } },
    });
    return {
      el,
      draw(ring, cols) {
        raw = [null].concat(cols.slice().reverse().map((c) => ring.col(c)));
        const totals = [];
        let acc = ring.t.map(() => 0);
        for (const c of cols) {  // bottom bucket first: running sums
          acc = acc.map((a, i) => a + (ring.col(c)[i] ?? 0));
          totals.push(acc);
        }
        chart.update([ring.t.slice(), ...totals.reverse()]);
      },
    };
  }

  function timeAxis() {
    const opts = { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false };
    // Whole seconds and up: sub-second ticks would print the same label twice.
    return { ...AXIS, space: 80, incrs: TIME_INCRS, values: (u, ticks) => ticks.map((t) => new Date(t * 1000).toLocaleTimeString([], opts)) };
  }

  /* Lines; `defs` = [{col, label, color, width, dash}]; `slo` draws a dashed limit. */
  function lines(el, defs, { unit, slo = null, sloLabel = "SLO", height = 190, counts = false } = {}) {
    const series = [{}].concat(defs.map((d) => ({
      label: d.label, stroke: d.color, width: d.width || 2, dash: d.dash, points: { show: false },
      spanGaps: false, value: (u, v) => fmt(v, unit),
    })));
    if (slo !== null) series.push({ label: sloLabel, stroke: "#f85149", width: 1.5, dash: [6, 5], points: { show: false }, value: () => fmt(slo, unit) });
    // Linear from zero: a log axis reads badly at a glance; the SLO line stays in view.
    const y = counts
      ? { range: (u, lo, hi) => [0, Math.max(2, Math.ceil((hi ?? 0) * 1.25))] }
      : { range: (u, lo, hi) => [0, Math.max(1, (hi ?? 0) * 1.1, slo ? slo * 1.25 : 0)] };
    const chart = mount(el, {
      series, height, data: [[], ...series.slice(1).map(() => [])],
      axes: [timeAxis(), { ...AXIS, size: 64, ...(counts ? { incrs: COUNT_INCRS, space: 18 } : {}), values: (u, t) => t.map((v) => fmt(v, unit)) }],
      scales: { x: { time: true }, y },
    });
    return {
      el,
      draw(ring) {
        const data = [ring.t.slice(), ...defs.map((d) => ring.col(d.col).slice())];
        if (slo !== null) data.push(ring.t.map(() => slo));
        chart.update(data, defs.length);
      },
    };
  }

  return { Ring, stacked, lines, fmt, HISTORY_S, BUCKET_COLORS };
})();
