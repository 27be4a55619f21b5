// Live updates of the emails list and an email's page from the team's event stream.
// Every page works without this file; it only saves a reload.
(function () {
  "use strict";
  var root = document.querySelector("[data-live]");
  if (!root || !window.EventSource) { return; }
  var types = (root.getAttribute("data-event-types") || "").split(",");
  var statuses = {};
  types.forEach(function (t) { statuses[t] = t.slice("email.".length); });
  var informational = { "email.delivery_delayed": 1, "email.opened": 1, "email.clicked": 1 };
  // From where the page was read: nothing recorded while it loaded is missed.
  var since = root.getAttribute("data-since");
  var source = new EventSource("/ui/events/stream" + (since ? "?since=" + encodeURIComponent(since) : ""));
  var fresh = 0;
  source.addEventListener("open", function () { root.setAttribute("data-live-state", "open"); });
  source.addEventListener("error", function () { root.setAttribute("data-live-state", "closed"); });

  function setStatus(container, type) {
    if (informational[type]) { return; }
    var badge = container.querySelector(".status .badge");
    if (badge) {
      badge.textContent = statuses[type];
      badge.className = "badge " + statuses[type];
    }
  }

  function onListEvent(type, envelope) {
    var id = envelope.data && envelope.data.email_id;
    if (!id) { return; }
    var row = root.querySelector('tr[data-email-id="' + CSS.escape(id) + '"]');
    if (row) {
      setStatus(row, type);
      var last = row.querySelector(".last-event");
      if (last) { last.textContent = type; }
    } else if (type === "email.queued" || type === "email.scheduled") {
      fresh += 1;
      var notice = document.getElementById("live-notice");
      if (notice) {
        notice.textContent = "";
        var link = document.createElement("a");
        link.href = window.location.pathname + window.location.search;
        link.textContent = fresh + " new email" + (fresh === 1 ? "" : "s") + ": reload the list";
        notice.appendChild(link);
        notice.hidden = false;
      }
    }
  }

  function onEmailEvent(type, envelope, frame) {
    var id = envelope.data && envelope.data.email_id;
    if (id !== root.getAttribute("data-email-id")) { return; }
    var timeline = document.getElementById("timeline");
    if (timeline && !timeline.querySelector('[data-event-id="' + CSS.escape(frame.lastEventId) + '"]')) {
      var item = document.createElement("li");
      item.setAttribute("data-event-id", frame.lastEventId);
      var when = document.createElement("time");
      when.dateTime = envelope.created_at;
      when.textContent = envelope.created_at;
      var what = document.createElement("strong");
      what.textContent = type;
      item.appendChild(when);
      item.appendChild(document.createTextNode(" "));
      item.appendChild(what);
      timeline.appendChild(item);
    }
    setStatus(root, type);
  }

  types.forEach(function (type) {
    source.addEventListener(type, function (frame) {
      var envelope;
      try { envelope = JSON.parse(frame.data); } catch (e) { return; }
      if (root.getAttribute("data-live") === "list") { onListEvent(type, envelope); }
      else { onEmailEvent(type, envelope, frame); }
    });
  });
  window.addEventListener("pagehide", function () { source.close(); });
}());
