// The web view's one script: no framework, no build step.
// - keeps the page live: one EventSource on the page's stream (body[data-stream]);
//   on "changed" (the bus's nudges) it reads the page again and swaps each region
//   marked data-refresh; on "output" it shows the running attempt's output; when
//   the stream drops (webd restarting) the browser connects again by itself, and
//   the page is read again on the next "hello".
// - sends the buttons' actions: POST /api/works/{id}/actions with the session's
//   CSRF token; a 403 "csrf" (webd restarted) reads a new token and tries once more.
"use strict";
(function () {
  const body = document.body;
  const live = document.getElementById("live");
  const flash = document.getElementById("flash");
  let csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";
  let timer = null;
  let connectedOnce = false;

  function say(text, isError) {
    if (!flash) return;
    flash.textContent = text;
    flash.className = isError ? "error" : "";
  }

  async function refresh() {
    const r = await fetch(location.href, { credentials: "same-origin" });
    if (r.redirected && new URL(r.url).pathname === "/login") { location.href = r.url; return; }
    if (!r.ok) return;
    const doc = new DOMParser().parseFromString(await r.text(), "text/html");
    document.querySelectorAll("[data-refresh]").forEach(function (el) {
      const fresh = el.id && doc.getElementById(el.id);
      if (fresh && fresh.innerHTML !== el.innerHTML) {
        const focused = document.activeElement && el.contains(document.activeElement);
        if (!focused) el.innerHTML = fresh.innerHTML;
      }
    });
  }

  function soon() {
    clearTimeout(timer);
    timer = setTimeout(function () { refresh().catch(function () {}); }, 200);
  }

  function showOutput(data) {
    const box = document.getElementById("output");
    if (!box) return;
    box.textContent = "";
    (data.outputs || []).forEach(function (o) {
      const h = document.createElement("h3");
      h.textContent = o.name + " (" + o.size + " bytes)";
      const pre = document.createElement("pre");
      pre.className = "output";
      pre.dataset.name = o.name;
      pre.textContent = o.text;
      box.appendChild(h);
      box.appendChild(pre);
      pre.scrollTop = pre.scrollHeight;
    });
  }

  if (body.dataset.stream && window.EventSource) {
    const es = new EventSource(body.dataset.stream);
    es.addEventListener("hello", function () {
      if (live) { live.textContent = "live"; live.className = "live on"; }
      if (connectedOnce) soon();
      connectedOnce = true;
    });
    es.addEventListener("changed", soon);
    es.addEventListener("output", function (e) {
      try { showOutput(JSON.parse(e.data)); } catch (err) { /* a bad frame is skipped */ }
    });
    es.onerror = function () {
      if (live) { live.textContent = "reconnecting…"; live.className = "live off"; }
    };
  }

  async function newToken() {
    const r = await fetch("/api/session", { credentials: "same-origin" });
    if (r.ok) csrf = (await r.json()).csrf || "";
  }

  async function act(work, provider, action, input) {
    const send = function () {
      const payload = { action: action };
      if (provider) payload.provider = provider;
      if (input !== undefined && input !== null) payload.input = input;
      return fetch("/api/works/" + encodeURIComponent(work) + "/actions", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify(payload),
      });
    };
    let r = await send();
    if (r.status === 403) {
      const e = await r.clone().json().catch(function () { return {}; });
      if (e.error && e.error.code === "csrf") { await newToken(); r = await send(); }
    }
    const answer = await r.json().catch(function () { return {}; });
    if (r.ok) say(answer.message || (action + " done"), false);
    else say((answer.error && answer.error.message) || ("the action failed: " + r.status), true);
    soon();
  }

  document.addEventListener("click", function (ev) {
    const b = ev.target.closest("button.act");
    if (!b) return;
    ev.preventDefault();
    let input = null;
    if (b.dataset.input) { try { input = JSON.parse(b.dataset.input); } catch (err) { input = null; } }
    b.disabled = true;
    act(b.dataset.work, b.dataset.provider, b.dataset.action, input)
      .finally(function () { b.disabled = false; });
  });

  document.addEventListener("submit", function (ev) {
    const f = ev.target.closest("form.act-form");
    if (!f) return;
    ev.preventDefault();
    const value = f.querySelector("input").value;
    let input = {};
    if (f.dataset.input) { try { input = JSON.parse(f.dataset.input) || {}; } catch (err) { input = {}; } }
    input[f.dataset.name || "text"] = value;
    act(f.dataset.work, f.dataset.provider, f.dataset.action, input);
  });
})();
