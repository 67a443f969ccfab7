// Progressive enhancement only: every page works without this file.
(function () {
  "use strict";
  var zone = "UTC";
  try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC"; } catch (e) { /* keep UTC */ }
  // Times are shown in the zone the person chose, else in the browser's.
  var shownZone = document.body.getAttribute("data-zone") || zone;

  // Time zone fields start at the zone times are shown in (a filter that already has one keeps it, UTC too).
  document.querySelectorAll("[data-tz]").forEach(function (input) {
    if (!(input.hasAttribute("data-keep") && input.value)) input.value = shownZone;
  });

  // A local date-time of an instant in a zone, as a datetime-local input takes it.
  function toLocal(instant, tz) {
    try {
      var p = {};
      new Intl.DateTimeFormat("en-US", { timeZone: tz, hourCycle: "h23", year: "numeric", month: "2-digit",
        day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" })
        .formatToParts(instant).forEach(function (x) { p[x.type] = x.value; });
      return p.year + "-" + p.month + "-" + p.day + "T" + ("0" + (+p.hour % 24)).slice(-2) + ":" + p.minute + ":" + p.second;
    } catch (e) { return null; }
  }

  // The UTC instant a local date-time in a zone stands for.
  function toUtc(local, tz) {
    var m = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?/.exec(local);
    if (!m) return null;
    var guess = Date.UTC(+m[1], +m[2] - 1, +m[3], +m[4], +m[5], +(m[6] || 0));
    try {
      var fmt = new Intl.DateTimeFormat("en-US", { timeZone: tz || "UTC", hourCycle: "h23",
        year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit" });
      // Two rounds find the offset of the zone at that instant.
      var t = guess;
      for (var i = 0; i < 2; i++) {
        var p = {};
        fmt.formatToParts(new Date(t)).forEach(function (x) { p[x.type] = x.value; });
        var shown = Date.UTC(+p.year, +p.month - 1, +p.day, +p.hour % 24, +p.minute, +p.second);
        t = guess - (shown - t);
      }
      return new Date(t);
    } catch (e) { return null; }
  }

  document.querySelectorAll("[data-picker]").forEach(function (picker) {
    var at = picker.querySelector("[data-at]"), tz = picker.querySelector("[data-tz]"), out = picker.querySelector("[data-utc]");
    // A picker filled in with an instant shows it in the zone just chosen.
    if (at.hasAttribute("data-instant")) {
      var local = toLocal(new Date(at.getAttribute("data-instant")), tz.value);
      if (local) at.value = local;
    }
    function update() {
      if (!at.value) { out.textContent = "now"; return; }
      var d = toUtc(at.value, tz.value);
      out.textContent = d ? d.toISOString().replace(".000Z", "Z") : "not a valid time in " + tz.value;
    }
    at.addEventListener("input", update);
    tz.addEventListener("input", update);
    update();
  });

  // "Select all" for a table of checkboxes.
  document.querySelectorAll("[data-select-all]").forEach(function (all) {
    all.addEventListener("change", function () {
      all.closest("table").querySelectorAll("tbody input[type=checkbox]").forEach(function (box) { box.checked = all.checked; });
    });
  });

  // Forms that ask before they act.
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (ev) {
      if (!window.confirm(form.getAttribute("data-confirm"))) ev.preventDefault();
    });
  });

  // The target form shows the fields of the chosen type.
  document.querySelectorAll("input[data-switch=type]").forEach(function (radio) {
    radio.addEventListener("change", function () {
      document.querySelectorAll("fieldset[data-type]").forEach(function (fs) {
        fs.hidden = fs.getAttribute("data-type").split(" ").indexOf(radio.value) < 0;
      });
    });
  });

  // OAuth fields show only while OAuth is ticked (all show without script).
  document.querySelectorAll("[data-auth-switch]").forEach(function (box) {
    var fields = box.closest("form").querySelector("[data-auth]");
    function sync() { fields.hidden = !box.checked; }
    box.addEventListener("change", sync);
    sync();
  });

  // A schedule's form: the preview of its next runs follows what is typed.
  document.querySelectorAll("form[data-schedule-form]").forEach(function (form) {
    var timer = null;
    function refresh() {
      var data = new URLSearchParams(new FormData(form));
      data.delete("csrf");
      fetch("/portal/schedules/preview?" + data.toString(), { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          var old = form.querySelector("#preview");
          if (html && old) old.outerHTML = html;
          localTimes();
        })
        .catch(function () { /* the preview button still works */ });
    }
    form.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(refresh, 250); });
    form.addEventListener("change", function () { clearTimeout(timer); timer = setTimeout(refresh, 250); });
  });

  // "in 58 minutes", "2 minutes ago".
  function relative(d) {
    var s = (d.getTime() - Date.now()) / 1000, a = Math.abs(s);
    var unit = a < 45 ? "second" : a < 2700 ? "minute" : a < 129600 ? "hour" : "day";
    var n = Math.round(s / { second: 1, minute: 60, hour: 3600, day: 86400 }[unit]);
    try { return new Intl.RelativeTimeFormat("en", { numeric: "auto" }).format(n, unit); } catch (e) { return ""; }
  }

  // Every time also shows in the person's zone (unless that is UTC, shown
  // already) and relative to now.
  function localTimes() {
    var utc = shownZone === "UTC" || shownZone === "Etc/UTC";
    document.querySelectorAll("time[data-local]:not([data-shown])").forEach(function (t) {
      var d = new Date(t.getAttribute("datetime"));
      if (isNaN(d)) return;
      var s = document.createElement("small");
      s.className = "local";
      var local = "";
      if (!utc) {
        try { local = d.toLocaleString(undefined, { timeZone: shownZone, timeZoneName: "short" }) + " · "; } catch (e) { local = ""; }
      }
      s.textContent = " · " + local + relative(d);
      t.setAttribute("data-shown", "");
      t.after(s);
    });
  }
  localTimes();

  // Copy buttons: the clipboard where the browser allows it, otherwise the
  // text is selected for the person to copy.
  document.querySelectorAll("button[data-copy]").forEach(function (button) {
    var source = document.getElementById(button.getAttribute("data-copy"));
    if (!source) return;
    var status = button.nextElementSibling;
    function say(words) { if (status && status.matches(".copy-status")) status.textContent = words; }
    function select() {
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      var copied = false;
      try { copied = document.execCommand("copy"); } catch (e) { copied = false; }
      say(copied ? "Copied" : "Selected: press Ctrl+C to copy");
    }
    button.hidden = false;
    button.addEventListener("click", function () {
      var text = source.textContent.trim();
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(function () { say("Copied"); }, select);
      } else {
        select();
      }
    });
  });

  // A message being watched (a test message, a reschedule due soon) reloads
  // every second until it is settled, but never under a person's hands:
  // once a field is touched the page stays as it is.
  var watch = document.querySelector("[data-watch]");
  if (watch) {
    var touched = false;
    function touch() {
      if (touched) return;
      touched = true;
      watch.textContent = "Refreshing stopped while you edit. ";
      var a = document.createElement("a");
      a.href = window.location.pathname;
      a.textContent = "Refresh";
      watch.appendChild(a);
    }
    document.addEventListener("input", touch, true);
    document.addEventListener("focusin", function (e) {
      if (e.target.matches("input, select, textarea")) touch();
    });
    setTimeout(function () { if (!touched) window.location.reload(); }, 1000);
  }
})();
