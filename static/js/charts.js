// Draws every chart on the page: each <div data-chart="ID"> gets the figure from the
// json_script block with that id. Chart data is JSON, never HTML, and no inline script runs.
(function () {
  "use strict";
  function draw() {
    if (typeof Plotly === "undefined") { return; }
    document.querySelectorAll("[data-chart]").forEach(function (el) {
      var source = document.getElementById(el.dataset.chart);
      if (!source) { return; }
      var figure = JSON.parse(source.textContent);
      Plotly.newPlot(el, figure.data, figure.layout, {responsive: true, displaylogo: false});
    });
  }
  // Period pickers: editing a date switches the picker to "Custom" (the server does the same
  // when the dates differ from the preset, so the form also works without JavaScript).
  function wirePeriodPickers() {
    document.querySelectorAll(".period-picker").forEach(function (picker) {
      var select = picker.querySelector("[data-period-select]");
      if (!select) { return; }
      picker.querySelectorAll("input[type=date]").forEach(function (input) {
        input.addEventListener("change", function () { select.value = "custom"; });
      });
    });
  }
  function start() {
    wirePeriodPickers();
    draw();
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
