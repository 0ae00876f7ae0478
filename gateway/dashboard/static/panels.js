/* One model's section: big numbers, charts, workers, autoscaler, dead letters.
 * Every value goes in through textContent: job errors are user data. */
"use strict";

const SluicePanels = (() => {
  const { Ring, stacked, lines, fmt } = SluiceCharts;
  const STATES = ["starting", "standby", "ready", "draining", "quarantined"];
  const STATE_DOT = { starting: "warn", standby: "info", ready: "ok", draining: "info", quarantined: "bad" };
  const COMPACT_AT = 24;  // workers: smaller tiles past this many, still one screen at 50

  function h(tag, attrs = {}, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (k === "class") el.className = v;
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v);
    }
    for (const kid of kids) if (kid) el.append(kid);
    return el;
  }

  function kpi(label) {
    const value = h("div", { class: "value" });
    const sub = h("div", { class: "sub" });
    const el = h("div", { class: "kpi" }, h("div", { class: "label", text: label }), value, sub);
    return {
      el,
      set(main, unit, subText, tone) {
        value.textContent = main;
        if (unit) value.append(h("small", { text: unit }));
        sub.textContent = subText || "\u00a0";
        el.className = "kpi" + (tone ? " " + tone : "");
      },
    };
  }

  function card(title, body, right) {
    return h("div", { class: "card" }, h("h3", {}, h("span", { text: title }), right ? h("span", { class: "right" }, right) : null), body);
  }

  function clock(ms) {
    return new Date(ms).toLocaleTimeString([], { hour12: false });
  }

  function latencyTone(p99, slo) {
    if (p99 === null || p99 === undefined) return "";
    return p99 > slo ? "bad" : p99 > slo * 0.5 ? "warn" : "ok";
  }

  class ModelPanel {
    constructor(m) {
      this.name = m.name;
      this.ring = new Ring(["arrived", "succeeded", "queued", "wait50", "wait99", "e2e50", "e2e99",
        "current", "desired", "ready", "ttft50", "ttft99", "slots", "slotsBusy", "occupancy", "tps",
        ...m.buckets.flatMap((b) => ["q" + b.bucket, "c" + b.bucket])]);
      this.buckets = m.buckets.map((b) => b.bucket);
      this.backlogUnit = "jobs";
      this.sortBy = "state";
      this.el = h("section", { class: "model", id: "model-" + m.name, "data-model": m.name });
      this.build(m);
    }

    build(m) {
      // Is it keeping up? Decided by the gateway (gateway/dashboard/verdict.py), shown here.
      this.verdict = h("span", { class: "verdict", "data-role": "verdict" });
      this.why = h("span", { class: "why", "data-role": "why" });
      this.pause = SluicePause.control(m.name, h);  // paused badge, pause/resume (ADR 0154)
      const head = h("div", { class: "model-head" }, h("h2", { text: m.name }), h("span", { class: "handler", text: m.handler }), this.pause.el, this.why, this.verdict);
      this.k = { queued: kpi("Queued"), thr: kpi("Throughput"), wait: kpi("p99 queue wait"), e2e: kpi("p99 end to end"),
        workers: kpi("Workers ready"), replicas: kpi("Replicas"), dead: kpi("Dead letters") };
      const kpis = h("div", { class: "kpis" }, ...Object.values(this.k).map((x) => x.el));

      const chartEl = (role) => h("div", { class: "chart", "data-chart": role });
      const seg = h("span", { class: "seg" });
      for (const unit of ["jobs", "cost"]) {
        seg.append(h("button", { type: "button", class: unit === "jobs" ? "on" : "", text: unit, onclick: (ev) => {
          this.backlogUnit = unit;
          for (const b of seg.children) b.classList.toggle("on", b === ev.target);
          this.draw();
        } }));
      }
      const backlogEl = chartEl("backlog");
      this.backlog = { chart: null, el: backlogEl };
      this.thr = lines(chartEl("throughput"), [
        { col: "arrived", label: "arrived", color: "#8594a8", width: 1.5 },
        { col: "succeeded", label: "completed", color: "#3fb950" }], { unit: "/s" });
      this.wait = lines(chartEl("wait"), [
        { col: "wait50", label: "p50", color: "#58a6ff", width: 1.5 },
        { col: "wait99", label: "p99", color: "#2f81f7", width: 2.5 }], { unit: "ms", slo: m.slo_wait_ms });
      this.e2e = lines(chartEl("e2e"), [
        { col: "e2e50", label: "p50", color: "#c297ff", width: 1.5 },
        { col: "e2e99", label: "p99", color: "#a371f7", width: 2.5 }], { unit: "ms", slo: m.slo_wait_ms, sloLabel: "wait SLO" });
      const charts = h("div", { class: "grid charts" },
        card("Backlog per bucket", backlogEl, seg),
        card("Throughput", this.thr.el, h("span", { class: "muted", text: "jobs/s" })),
        card("Queue wait", this.wait.el, h("span", { class: "muted", text: "SLO " + fmt(m.slo_wait_ms, "ms") + " (p99)" })),
        card("End to end", this.e2e.el, h("span", { class: "muted", text: "enqueue → result" })));

      this.states = h("div", { class: "states" });
      this.tiles = h("div", { class: "tiles", "data-role": "workers" });
      const sort = h("select", { "aria-label": "sort workers", onchange: (ev) => { this.sortBy = ev.target.value; this.renderWorkers(); } });
      for (const [v, label] of [["state", "by state"], ["rate", "by rate"], ["batch", "by batch"], ["age", "by age"], ["id", "by id"]]) sort.append(h("option", { value: v, text: label }));
      this.replicas = lines(chartEl("replicas"), [
        { col: "desired", label: "desired", color: "#e3b341", width: 2, dash: [5, 4] },
        { col: "current", label: "current", color: "#d7dee8", width: 2 },
        { col: "ready", label: "ready", color: "#3fb950", width: 1.5 }], { unit: "", height: 130, counts: true });
      this.decisions = h("tbody", { "data-role": "decisions" });
      this.scaleNote = h("div", { class: "empty" });
      this.deadCount = h("div", { class: "dead-count", "data-role": "dead-count" });
      this.deadList = h("tbody", {});
      const lower = h("div", { class: "grid lower" },
        card("Workers", h("div", {}, this.states, this.tiles), sort),
        card("Autoscaler", h("div", {}, this.replicas.el, this.scaleNote, h("div", { class: "scroll" },
          h("table", { class: "log" }, h("thead", {}, h("tr", {}, ...["time", "replicas", "reason", "queued", "p99 it saw"].map((t) => h("th", { text: t })))), this.decisions)))),
        card("Dead letters", h("div", { class: "dead" }, this.deadCount, h("div", { class: "scroll" }, h("table", { class: "log" }, this.deadList))),
          SluiceActions.bar(m.name, h)));
      this.gen = m.generate ? this.buildGeneration(m, chartEl) : null;
      this.el.append(head, kpis, charts, ...(this.gen ? [this.gen.el] : []), lower);
    }

    /* A generative model's row (ADR 0149): slots, occupancy, time to first token
     * against its SLO, output tokens/s. */
    buildGeneration(m, chartEl) {
      const g = m.generate;
      const note = () => h("span", { class: "muted" });
      const gen = {
        slots: lines(chartEl("slots"), [
          { col: "slots", label: "slots", color: "#8594a8", width: 1.5 },
          { col: "slotsBusy", label: "busy", color: "#3fb950" }], { unit: "", counts: true }),
        occupancy: lines(chartEl("occupancy"), [{ col: "occupancy", label: "busy", color: "#e3b341" }], { unit: "%" }),
        ttft: lines(chartEl("ttft"), [
          { col: "ttft50", label: "p50", color: "#ffa657", width: 1.5 },
          { col: "ttft99", label: "p99", color: "#f0883e", width: 2.5 }], { unit: "ms", slo: g.ttft_slo_ms, sloLabel: "TTFT SLO" }),
        tps: lines(chartEl("tokens"), [{ col: "tps", label: "tokens/s", color: "#58a6ff" }], { unit: "/s" }),
        notes: { slots: note(), occupancy: note(), ttft: note(), tps: note() },
      };
      gen.el = h("div", { class: "grid charts generation", "data-role": "generation" },
        card("Slots", gen.slots.el, gen.notes.slots),
        card("Slot occupancy", gen.occupancy.el, gen.notes.occupancy),
        card("Time to first token", gen.ttft.el, gen.notes.ttft),
        card("Output tokens/s", gen.tps.el, gen.notes.tps));
      return gen;
    }

    renderGeneration(g) {
      if (!this.gen || !g) return;
      const n = this.gen.notes;
      n.slots.textContent = fmt(g.slots_busy) + " of " + fmt(g.slots) + " busy";
      n.occupancy.textContent = g.occupancy === null ? "no slots reported" : Math.round(100 * g.occupancy) + "%";
      n.ttft.textContent = "p99 " + fmt(g.ttft_p99_ms, "ms") + " · SLO " + fmt(g.ttft_slo_ms, "ms");
      n.ttft.className = "muted " + latencyTone(g.ttft_p99_ms, g.ttft_slo_ms);
      n.tps.textContent = g.tokens_per_s_per_worker === null ? "measuring…" : fmt(g.tokens_per_s_per_worker, "/s") + " per worker";
    }

    /* After the section is in the document (uPlot measures its element). */
    mountCharts() {
      this.backlog.chart = stacked(this.backlog.el, this.buckets, "");
      this.backlog.el.dataset.unit = "jobs";
    }

    /* Points of finished 10 s windows from before the first live sample. */
    prefill(points, beforeS) {
      for (const p of points) {
        if (p.t_s >= beforeS - 1) continue;
        this.ring.push(p.t_s, { succeeded: p.succeeded_per_s, wait50: p.wait_p50_ms, wait99: p.wait_p99_ms,
          e2e50: p.e2e_p50_ms, e2e99: p.e2e_p99_ms });
      }
    }

    update(m, tS) {
      this.m = m;
      const latest = m.autoscaler.latest;
      const vals = {
        arrived: m.rates ? m.rates.arrived : null, succeeded: m.rates ? m.rates.succeeded : null,
        queued: m.queued, wait50: m.latency.wait.p50_ms, wait99: m.latency.wait.p99_ms,
        e2e50: m.latency.e2e.p50_ms, e2e99: m.latency.e2e.p99_ms,
        current: latest ? latest.current : null, desired: latest ? latest.desired : null,
        ready: m.workers.by_state.ready || 0,
      };
      for (const b of m.buckets) { vals["q" + b.bucket] = b.queued; vals["c" + b.bucket] = b.queued_cost; }
      const g = m.generate;
      if (g) Object.assign(vals, { ttft50: g.ttft_p50_ms, ttft99: g.ttft_p99_ms, slots: g.slots, slotsBusy: g.slots_busy,
        occupancy: g.occupancy === null ? null : 100 * g.occupancy, tps: g.tokens_per_s });
      this.ring.push(tS, vals);
      this.renderKpis(m);
      this.renderWorkers();
      this.renderAutoscaler(m);
      this.renderDead(m);
      this.renderGeneration(m.generate);
      this.draw();
    }

    draw() {
      const cols = this.buckets.map((b) => (this.backlogUnit === "jobs" ? "q" : "c") + b);
      this.backlog.chart.draw(this.ring, cols);
      this.backlog.el.dataset.unit = this.backlogUnit;
      this.thr.draw(this.ring);
      this.wait.draw(this.ring);
      this.e2e.draw(this.ring);
      this.replicas.draw(this.ring);
      if (this.gen) for (const c of [this.gen.slots, this.gen.occupancy, this.gen.ttft, this.gen.tps]) c.draw(this.ring);
    }

    renderKpis(m) {
      this.pause.update(m.pause);
      this.verdict.textContent = m.verdict.text;
      this.verdict.className = "verdict " + m.verdict.level;
      this.why.textContent = m.verdict.why;
      this.k.queued.set(fmt(m.queued), "", "cost " + fmt(m.queued_cost) + " · " + fmt(m.in_flight) + " running");
      this.k.thr.set(m.rates ? fmt(m.rates.succeeded, "/s").replace("/s", "") : "–", "jobs/s",
        m.rates ? "arriving " + fmt(m.rates.arrived, "/s") : "measuring…");
      const w = m.latency.wait, e = m.latency.e2e;
      this.k.wait.set(fmt(w.p99_ms, "ms"), "", "p50 " + fmt(w.p50_ms, "ms") + " · SLO " + fmt(m.slo_wait_ms, "ms"), latencyTone(w.p99_ms, m.slo_wait_ms));
      this.k.e2e.set(fmt(e.p99_ms, "ms"), "", "p50 " + fmt(e.p50_ms, "ms") + " · enqueue → result");
      const s = m.workers.by_state;
      this.k.workers.set(String(s.ready || 0), "/ " + m.workers.total,
        [s.starting ? s.starting + " starting" : "", s.draining ? s.draining + " draining" : "", s.quarantined ? s.quarantined + " quarantined" : ""].filter(Boolean).join(" · ") || "capacity " + fmt(m.workers.service_rate) + " cost/s",
        s.quarantined ? "bad" : (s.ready || 0) === 0 && m.queued > 0 ? "warn" : "");
      const latest = m.autoscaler.latest;
      if (latest) {
        const arrow = latest.desired === latest.current ? "" : latest.desired > latest.current ? " ↑" : " ↓";
        this.k.replicas.set(String(latest.current), "→ " + latest.desired + arrow, latest.reason + " · " + fmt(latest.age_s) + " s ago", latest.desired !== latest.current ? "warn" : "");
      } else {
        this.k.replicas.set("–", "", "no autoscaler decision lately");
      }
      const wh = m.webhooks;
      const hooks = wh.pending || wh.dead ? " · webhooks " + fmt(wh.pending) + " pending, " + fmt(wh.dead) + " given up" : "";
      this.k.dead.set(fmt(m.dead_letters.count), "", (m.counters.failed ? fmt(m.counters.failed) + " failed in all" : "none failed") + hooks, m.dead_letters.count || wh.dead ? "bad" : "");
    }

    renderWorkers() {
      const m = this.m;
      if (!m) return;
      this.states.replaceChildren(...STATES.map((st) => h("span", {}, h("i", { class: "dot " + STATE_DOT[st] }), " " + st, h("b", { text: String(m.workers.by_state[st] || 0) }))));
      const rank = Object.fromEntries(STATES.map((s, i) => [s, i]));
      const key = {
        state: (w) => [rank[w.state] ?? 9, -w.age_s], rate: (w) => [-w.service_rate], batch: (w) => [-w.batch_size],
        age: (w) => [-w.age_s], id: (w) => [w.id],
      }[this.sortBy];
      const rows = m.workers.list.slice().sort((a, b) => {
        const ka = key(a), kb = key(b);
        for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i] < kb[i] ? -1 : 1;
        return a.id < b.id ? -1 : 1;
      });
      this.tiles.classList.toggle("compact", rows.length > COMPACT_AT);
      if (!rows.length) {
        this.tiles.replaceChildren(h("div", { class: "empty", text: "No live workers." }));
        return;
      }
      this.tiles.replaceChildren(...rows.map((w) => h("div", {
        class: "tile " + w.state, "data-worker": w.id, "data-state": w.state,
        title: `${w.id}\n${w.state} on ${w.host} pid ${w.pid}, ${w.device}\nbatch ${w.batch_size} of ${m.max_batch}, holding ${w.held}\n${w.service_rate} cost/s, ${w.jobs} jobs, ${w.failures} failed batches\nup ${Math.round(w.age_s)} s`,
      }, h("i", { class: "busy" + (w.busy ? " on" : "") }),
      // The end of an id tells workers apart (host-pid-suffix): cut from the left.
      h("div", { class: "wid" }, h("span", { dir: "ltr", text: w.id })),
      h("div", { class: "meta device", text: w.device + " · " + w.state }),
      h("div", { class: "meta" }, h("span", { class: "rate", text: fmt(w.service_rate) }), " cost/s"),
      h("div", { class: "meta", text: "batch " + w.batch_size + "/" + m.max_batch }))));
    }

    renderAutoscaler(m) {
      const latest = m.autoscaler.latest;
      this.scaleNote.textContent = latest ? "" : "No decision recorded in the last minute: is the autoscaler running?";
      this.scaleNote.hidden = Boolean(latest);
      this.decisions.replaceChildren(...m.autoscaler.decisions.slice(0, 20).map((d) => {
        const dir = d.desired > d.current ? "up" : d.desired < d.current ? "down" : "";
        return h("tr", {}, h("td", { class: "muted", text: clock(d.at_ms) }), h("td", { class: "num", text: d.current + " → " + d.desired }),
          h("td", {}, h("span", { class: "chip " + dir, text: d.reason })), h("td", { class: "num", text: fmt(d.queued) }),
          h("td", { class: "num", text: fmt(d.p99_wait_ms, "ms") }));
      }));
      if (!m.autoscaler.decisions.length) this.decisions.replaceChildren(h("tr", {}, h("td", { class: "empty", colspan: "5", text: "No decisions yet." })));
    }

    renderDead(m) {
      const d = m.dead_letters;
      this.deadCount.textContent = fmt(d.count);
      this.deadCount.className = "dead-count" + (d.count ? " bad" : "");
      if (!d.recent.length) {
        this.deadList.replaceChildren(h("tr", {}, h("td", { class: "empty", text: d.count ? "Their records expired." : "Nothing failed for good." })));
        return;
      }
      this.deadList.replaceChildren(...d.recent.map((x) => h("tr", { title: x.id },
        h("td", { class: "when", text: x.at_ms ? clock(x.at_ms) : "" }),
        h("td", {}, h("span", { class: "chip", text: x.type }), " ", h("span", { class: "msg", text: x.message })))));
    }
  }

  return { ModelPanel, h };
})();
