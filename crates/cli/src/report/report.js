// Click a pod (box or name): its --explain text (the tooltip's) goes to the side panel.
(function () {
  var panel = document.getElementById("explain");
  var selected = [];
  function text(el) {
    var t = el.querySelector("title");
    return t ? t.textContent : el.getAttribute("title") || "";
  }
  function show(pod, el) {
    selected.forEach(function (s) { s.classList.remove("sel"); });
    selected = Array.prototype.slice.call(document.querySelectorAll(".pod")).filter(function (s) {
      return s.getAttribute("data-pod") === pod;
    });
    selected.forEach(function (s) { s.classList.add("sel"); });
    panel.textContent = text(el);
  }
  document.addEventListener("click", function (ev) {
    var el = ev.target.closest ? ev.target.closest(".pod") : null;
    if (el) { show(el.getAttribute("data-pod"), el); }
  });
  // The page's laid-out size, for whoever checks that a large plan still fits a few screens.
  document.body.setAttribute("data-height", String(document.documentElement.scrollHeight));
  document.body.setAttribute("data-width", String(document.documentElement.scrollWidth));
  document.body.setAttribute("data-ready", "1");
})();
