// Schedules (docs/schedules.md): the decision form's zone defaults to the browser's own (Intl), else the
// site's, as the server rendered it; a scheduled time (a publication's, a retraction's: data-due-now says what
// happens at T) shows a live countdown. No framework, no inline script.
(function () {
  "use strict";

  function chooseBrowserZone() {
    var select = document.getElementById("publish-zone");
    if (!select || select.dataset.zoneChosen) return;
    var zone = "";
    try {
      zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "";
    } catch (e) {
      return;
    }
    for (var i = 0; i < select.options.length; i++) {
      if (select.options[i].value === zone) {
        select.value = zone;
        return;
      }
    }
  }

  function pickAtWhenTimeTyped() {
    var input = document.getElementById("publish-at");
    var at = document.getElementById("publish-when-at");
    if (input && at) input.addEventListener("input", function () { at.checked = true; });
  }

  function describe(ms, dueNow) {
    if (ms <= 0) return dueNow || "due now: publishing when a worker claims it";
    var s = Math.floor(ms / 1000), d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600);
    var m = Math.floor((s % 3600) / 60), sec = s % 60;
    var parts = [];
    if (d) parts.push(d + " d");
    if (d || h) parts.push(h + " h");
    parts.push(m + " min");
    if (!d) parts.push(sec + " s");
    return "in " + parts.join(" ");
  }

  // The page says what the database's clock read when it was drawn: the countdown runs on that clock.
  var skews = new Map();

  function tick() {
    var clocks = document.querySelectorAll("time[data-countdown]");
    for (var i = 0; i < clocks.length; i++) {
      var clock = clocks[i];
      if (!skews.has(clock)) {
        var serverNow = Date.parse(clock.dataset.serverNow || "");
        skews.set(clock, isNaN(serverNow) ? 0 : serverNow - Date.now());
      }
      var due = Date.parse(clock.getAttribute("datetime"));
      if (!isNaN(due)) clock.textContent = describe(due - (Date.now() + skews.get(clock)), clock.dataset.dueNow);
    }
  }

  document.addEventListener("DOMContentLoaded", function () {
    chooseBrowserZone();
    pickAtWhenTimeTyped();
    tick();
    window.setInterval(tick, 1000);
  });
})();
