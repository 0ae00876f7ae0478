/* Pause and resume a model (docs/adr/0154): a badge while it is paused (since when,
 * whether it refuses submits) and one button that pauses or resumes it. Each asks
 * for confirmation, then calls the admin REST route with the admin key the page
 * holds (the audit trail records that key's name). */
"use strict";

const SluicePause = (() => {
  const KEY_ITEM = "sluice.adminKey";  // dashboard.js keeps the key there

  async function post(model, verb, out) {
    const key = sessionStorage.getItem(KEY_ITEM);
    const headers = { "Content-Type": "application/json", ...(key ? { Authorization: "Bearer " + key } : {}) };
    try {
      const resp = await fetch(`/v1/admin/models/${encodeURIComponent(model)}/${verb}`,
        { method: "POST", headers, body: "{}" });
      const body = await resp.json();
      out.textContent = resp.ok ? (body.paused ? "paused" : "resumed")
        : `${verb} refused (${resp.status}): ${(body.error && body.error.message) || ""}`;
    } catch (e) {
      out.textContent = `${verb} failed: the gateway did not answer`;
    }
  }

  /* The badge and button of one model; update(pause) shows its state. */
  function control(model, h) {
    let paused = false;
    const badge = h("span", { class: "paused-badge", "data-role": "paused", hidden: "" });
    const out = h("span", { class: "muted", "data-role": "pause-result" });
    const button = h("button", { type: "button", "data-action": "pause", text: "Pause", onclick: () => {
      const ask = paused ? `Resume ${model}? Its workers claim again at once.`
        : `Pause ${model}? Its workers stop claiming (batches in hand finish) and the autoscaler holds its count until it is resumed.`;
      if (window.confirm(ask)) post(model, paused ? "resume" : "pause", out);
    } });
    const el = h("span", { class: "actions pause" }, badge, button, out);
    function update(p) {
      paused = !!(p && p.paused);
      badge.hidden = !paused;
      badge.textContent = paused ? "PAUSED" + (p.refuse_submits ? " · refusing jobs" : "") : "";
      if (paused && p.at_ms) badge.title = "since " + new Date(p.at_ms).toLocaleString() + (p.by ? " by " + p.by : "");
      button.textContent = paused ? "Resume" : "Pause";
      button.dataset.action = paused ? "resume" : "pause";
    }
    return { el, update };
  }

  return { control };
})();
