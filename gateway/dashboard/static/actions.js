/* Operator actions on a model (docs/adr/0153): redrive or purge its dead letters,
 * purge its queue. Each asks for confirmation, then calls the admin REST route with
 * the admin key the page holds (the audit trail records that key's name) and shows
 * how many jobs it acted on. */
"use strict";

const SluiceActions = (() => {
  const KEY_ITEM = "sluice.adminKey";  // dashboard.js keeps the key there
  const ACTIONS = [
    { id: "redrive", label: "Redrive all", path: "dead-letters/redrive",
      ask: (m) => `Put every dead letter of ${m} back in its queue (same ids, attempts reset)?` },
    { id: "purge-dead", label: "Purge dead letters", path: "dead-letters/purge",
      ask: (m) => `Delete every dead letter of ${m}?` },
    { id: "purge-queue", label: "Purge queue", path: "queue/purge",
      ask: (m) => `Cancel every queued job of ${m}? Whoever waits on them sees them cancelled.` },
  ];

  async function run(model, action, out) {
    if (!window.confirm(action.ask(model))) return;
    const key = sessionStorage.getItem(KEY_ITEM);
    const headers = { "Content-Type": "application/json", ...(key ? { Authorization: "Bearer " + key } : {}) };
    out.textContent = action.label + "…";
    try {
      const resp = await fetch(`/v1/admin/models/${encodeURIComponent(model)}/${action.path}`,
        { method: "POST", headers, body: "{}" });
      const body = await resp.json();
      out.textContent = resp.ok ? `${action.label}: ${body.count} job(s)`
        : `${action.label} refused (${resp.status}): ${(body.error && body.error.message) || ""}`;
    } catch (e) {
      out.textContent = `${action.label} failed: the gateway did not answer`;
    }
  }

  /* The buttons of one model, and the line that says what the last one did. */
  function bar(model, h) {
    const out = h("span", { class: "muted", "data-role": "action-result" });
    const buttons = ACTIONS.map((a) => h("button", { type: "button", "data-action": a.id, text: a.label,
      onclick: () => run(model, a, out) }));
    return h("span", { class: "actions", "data-role": "actions" }, ...buttons, out);
  }

  return { bar };
})();
