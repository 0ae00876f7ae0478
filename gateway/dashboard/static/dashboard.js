/* The page's loop: poll /dashboard/api/state, feed each model's panel, handle the key.
 * With API keys configured the JSON needs an admin key: asked once, kept in this tab's
 * sessionStorage, sent as a Bearer header. */
"use strict";

(() => {
  const { ModelPanel, h } = SluicePanels;
  const API = "/dashboard/api/state";
  const HISTORY = "/dashboard/api/history";
  const KEY_ITEM = "sluice.adminKey";
  const MIN_POLL_MS = 1000, MAX_POLL_MS = 2000;
  const panels = new Map();
  const ui = {
    conn: document.getElementById("conn"), banner: document.getElementById("banner"),
    auth: document.getElementById("auth"), authForm: document.getElementById("auth-form"),
    authKey: document.getElementById("auth-key"), authError: document.getElementById("auth-error"),
    main: document.getElementById("models"), nav: document.getElementById("models-nav"),
  };
  let pollMs = MIN_POLL_MS, timer = null, lastOk = 0;
  let history = null, historyTried = false;
  // Tests and curious operators can look inside: panels and the last payload.
  window.sluiceDashboard = { panels, last: null, polls: 0 };

  function headers() {
    const key = sessionStorage.getItem(KEY_ITEM);
    return key ? { Authorization: "Bearer " + key } : {};
  }

  function setConn(text, cls) {
    ui.conn.textContent = text;
    ui.conn.className = "conn " + cls;
  }

  function showBanner(text) {
    ui.banner.textContent = text;
    ui.banner.hidden = !text;
  }

  function askForKey(message) {
    ui.auth.hidden = false;
    ui.main.hidden = true;
    ui.authError.textContent = message;
    setConn("locked", "down");
    ui.authKey.focus();
  }

  ui.authForm.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const key = ui.authKey.value.trim();
    if (!key) return;
    sessionStorage.setItem(KEY_ITEM, key);
    ui.authKey.value = "";
    ui.auth.hidden = true;
    ui.main.hidden = false;
    schedule(0);
  });

  async function errorText(resp) {
    try {
      const body = await resp.json();
      return (body.error && body.error.message) || resp.statusText;
    } catch (e) {
      return resp.statusText;
    }
  }

  async function poll() {
    let resp;
    try {
      resp = await fetch(API, { headers: headers(), cache: "no-store" });
    } catch (e) {
      return unreachable("The gateway is not answering.");
    }
    if (resp.status === 401 || resp.status === 403) {
      const hadKey = Boolean(sessionStorage.getItem(KEY_ITEM));
      sessionStorage.removeItem(KEY_ITEM);
      const why = await errorText(resp);
      return askForKey(resp.status === 403
        ? "That key is not an admin key (403): the dashboard needs one with admin: true."
        : hadKey ? "That key was refused (401): " + why : "");
    }
    if (!resp.ok) return unreachable(`The dashboard's data is unavailable (${resp.status}): ${await errorText(resp)}`);
    const data = await resp.json();
    if (!historyTried) await loadHistory();
    render(data);
    lastOk = Date.now();
    pollMs = Math.min(MAX_POLL_MS, Math.max(MIN_POLL_MS, (data.refresh_s || 1) * 1000));
    showBanner("");
    setConn("live · " + new Date(data.at_ms).toLocaleTimeString([], { hour12: false }), "live");
    schedule(pollMs);
  }

  /* Once, before the first render: the last minutes of latency and completions from
   * Redis's 10 s windows, so the charts do not start empty. Optional: on failure the
   * charts just fill from now on. */
  async function loadHistory() {
    historyTried = true;
    try {
      const resp = await fetch(HISTORY, { headers: headers(), cache: "no-store" });
      if (resp.ok) history = await resp.json();
    } catch (e) {
      history = null;
    }
  }

  function unreachable(text) {
    const ago = lastOk ? ` Last data ${Math.round((Date.now() - lastOk) / 1000)} s ago; the charts keep their history.` : "";
    showBanner(text + ago + " Retrying…");
    setConn("reconnecting", "down");
    schedule(Math.min(5000, pollMs * 2));
  }

  function render(data) {
    window.sluiceDashboard.last = data;
    window.sluiceDashboard.polls += 1;
    const tS = data.at_ms / 1000;
    for (const m of data.models) {
      let panel = panels.get(m.name);
      if (!panel) {
        panel = new ModelPanel(m);
        panels.set(m.name, panel);
        ui.main.append(panel.el);
        panel.mountCharts();
        if (history && history.models[m.name]) panel.prefill(history.models[m.name], tS);
        panel.navDot = h("i", { class: "dot" });
        ui.nav.append(h("a", { href: "#model-" + m.name }, panel.navDot, m.name));
      }
      panel.update(m, tS);
      panel.navDot.className = "dot " + (panel.verdict.className.split(" ")[1] || "");
    }
  }

  function schedule(ms) {
    clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }

  schedule(0);
})();
