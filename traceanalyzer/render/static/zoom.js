(function () {
  "use strict";
  // The timeline to zoom into: drawn from the report's own bins (script#report-data), one
  // strip per device, for a window chosen by a button (the whole window, or one step) or by
  // the page's address (#zoom=FROM,TO in ms from the window's start: a link to the view).
  var host = document.getElementById("timeline-zoom");
  var legend = document.getElementById("timeline-legend");
  var raw = document.getElementById("report-data");
  if (!host || !raw) { return; }
  var data = JSON.parse(raw.textContent);
  var bins = data.timeline_bins || [];
  if (!bins.length) { return; }
  var NS = "http://www.w3.org/2000/svg";
  var t0 = data.window.start_ns || bins[0].start_ns;
  var t1 = data.window.end_ns || bins[bins.length - 1].end_ns;
  var layers = [], colours = {};
  legend.querySelectorAll("li[data-key]").forEach(function (li) {
    var sw = li.querySelector(".swatch");
    var key = li.getAttribute("data-key");
    if (sw && sw.style.background && key !== "step" && key !== "finding") {
      layers.push(key);
      colours[key] = sw.style.background;
    }
  });
  function layerNs(b, key) {
    var comm = b.comm_ns || 0, wait = Math.min(b.comm_wait_ns || 0, comm);
    if (key === "compute") { return Math.max((b.busy_ns || 0) - comm, 0); }
    if (key === "comm") { return comm - wait; }
    if (key === "comm_wait") { return wait; }
    return b[key + "_ns"] || 0;
  }
  var devices = [];
  bins.forEach(function (b) {
    var id = b.rank + "/" + b.device;
    if (devices.indexOf(id) < 0) { devices.push(id); }
  });
  devices = devices.slice(0, 8);
  var W = 1000, H = 40, GAP = 14, LEFT = 110;
  var buttons = document.createElement("div");
  buttons.className = "zoom-buttons";
  var label = document.createElement("p");
  label.className = "note";
  var svg = document.createElementNS(NS, "svg");
  svg.setAttribute("id", "zoom-view");
  svg.setAttribute("role", "img");
  svg.setAttribute("viewBox", "0 0 " + (LEFT + W) + " " + devices.length * (H + GAP));
  svg.setAttribute("width", "100%");
  host.appendChild(buttons);
  host.appendChild(label);
  host.appendChild(svg);
  function ms(ns) { return (ns / 1e6).toFixed(2); }
  function draw(lo, hi) {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    svg.setAttribute("data-from-ms", ms(lo - t0));
    svg.setAttribute("data-to-ms", ms(hi - t0));
    var scale = W / Math.max(hi - lo, 1);
    devices.forEach(function (id, row) {
      var y = row * (H + GAP);
      var name = document.createElementNS(NS, "text");
      name.setAttribute("x", 0);
      name.setAttribute("y", y + H / 2 + 4);
      name.setAttribute("font-size", "12");
      name.textContent = "rank " + id.replace("/", " GPU ");
      svg.appendChild(name);
      bins.forEach(function (b) {
        if (b.rank + "/" + b.device !== id || b.end_ns <= lo || b.start_ns >= hi) { return; }
        var x0 = Math.max(b.start_ns, lo), x1 = Math.min(b.end_ns, hi);
        var span = Math.max(b.end_ns - b.start_ns, 1), bottom = y + H;
        layers.forEach(function (key) {
          var h = H * layerNs(b, key) / span;
          if (h <= 0) { return; }
          var r = document.createElementNS(NS, "rect");
          r.setAttribute("x", LEFT + (x0 - lo) * scale);
          r.setAttribute("width", Math.max((x1 - x0) * scale, 0.5));
          r.setAttribute("y", bottom - h);
          r.setAttribute("height", h);
          r.setAttribute("fill", colours[key]);
          r.setAttribute("data-key", key);
          svg.appendChild(r);
          bottom -= h;
        });
      });
      (data.steps || []).forEach(function (s) {
        if (s.rank + "/" + s.device !== id || s.start_ns < lo || s.start_ns > hi) { return; }
        var l = document.createElementNS(NS, "line");
        var x = LEFT + (s.start_ns - lo) * scale;
        l.setAttribute("x1", x); l.setAttribute("x2", x);
        l.setAttribute("y1", y); l.setAttribute("y2", y + H);
        l.setAttribute("stroke", "#333");
        l.setAttribute("class", "step");
        svg.appendChild(l);
      });
    });
    label.textContent = "Showing " + ms(lo - t0) + " ms to " + ms(hi - t0) +
      " ms of the window (link to this view: #zoom=" + ms(lo - t0) + "," + ms(hi - t0) + ").";
  }
  function button(text, lo, hi) {
    var b = document.createElement("button");
    b.type = "button";
    b.textContent = text;
    b.addEventListener("click", function () { draw(lo, hi); });
    buttons.appendChild(b);
  }
  button("whole window", t0, t1);
  var first = devices[0];
  (data.steps || []).filter(function (s) { return s.rank + "/" + s.device === first; })
    .slice(0, 16).forEach(function (s) { button(s.name, s.start_ns, s.end_ns); });
  function fromHash() {
    var m = /zoom=([0-9.]+),([0-9.]+)/.exec(window.location.hash);
    if (m && parseFloat(m[2]) > parseFloat(m[1])) {
      draw(t0 + parseFloat(m[1]) * 1e6, t0 + parseFloat(m[2]) * 1e6);
    } else {
      draw(t0, t1);
    }
  }
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
