// The console's login: the credentials go to /api/login as JSON (never in a URL), and a failure is one line.
"use strict";
(function () {
  const form = document.getElementById("login");
  const line = document.getElementById("login-error");
  // Only a path of this console (not //host, not a scheme): where the login was asked for.
  const next = (() => {
    const n = new URLSearchParams(location.search).get("next") || "";
    return n.startsWith("/") && !n.startsWith("//") && !n.startsWith("/\\") ? n : "/cluster";
  })();
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    line.textContent = "";
    const f = new FormData(form);
    try {
      const r = await fetch("/api/login", {method: "POST", headers: {"Content-Type": "application/json"},
                                           body: JSON.stringify({user: f.get("user"), password: f.get("password")})});
      if (r.ok) { location.assign(next); return; }
      const data = await r.json().catch(() => ({}));
      line.textContent = String(data.error || r.statusText).split("\n")[0];
    } catch (e) {
      line.textContent = "The console did not answer: " + String(e.message || e).split("\n")[0];
    }
    form.elements.password.value = "";
    form.elements.password.focus();
  });
})();
