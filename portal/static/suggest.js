// Completions under the search box, from /api/suggest: the ARIA combobox pattern (a
// text box that controls a listbox). The page works without it: the box is a plain
// GET form, this only adds the list.
(function () {
  "use strict";
  var DEBOUNCE_MS = 120;
  var input = document.querySelector("form.search input[name=q]");
  if (!input || !window.fetch || !window.AbortController) return;
  var form = input.form;
  var list = document.createElement("ul");
  list.id = "suggestions";
  list.className = "suggestions";
  list.setAttribute("role", "listbox");
  list.setAttribute("aria-label", "Suggestions");
  list.hidden = true;
  input.parentNode.appendChild(list);
  input.setAttribute("role", "combobox");
  input.setAttribute("aria-autocomplete", "list");
  input.setAttribute("aria-controls", list.id);
  input.setAttribute("aria-expanded", "false");
  input.setAttribute("autocomplete", "off"); // the browser's own list would cover this one

  var timer = 0;
  var pending = null; // the request under way: aborted when a newer one starts
  var items = [];
  var active = -1;
  var typed = input.value; // what was typed, given back when no option is chosen

  function close() {
    list.hidden = true;
    list.replaceChildren();
    items = [];
    active = -1;
    input.setAttribute("aria-expanded", "false");
    input.removeAttribute("aria-activedescendant");
  }

  function show(suggestions) {
    close();
    suggestions.forEach(function (text, i) {
      var option = document.createElement("li");
      option.id = "suggestion-" + i;
      option.setAttribute("role", "option");
      option.setAttribute("aria-selected", "false");
      option.textContent = text;
      // mousedown, not click: the box keeps the focus (its blur would close the list)
      option.addEventListener("mousedown", function (event) {
        event.preventDefault();
        choose(i);
      });
      list.appendChild(option);
      items.push(option);
    });
    if (items.length) {
      list.hidden = false;
      input.setAttribute("aria-expanded", "true");
    }
  }

  function highlight(i) {
    if (active >= 0) items[active].setAttribute("aria-selected", "false");
    active = i;
    if (i < 0) {
      input.removeAttribute("aria-activedescendant");
      input.value = typed;
      return;
    }
    items[i].setAttribute("aria-selected", "true");
    input.setAttribute("aria-activedescendant", items[i].id);
    input.value = items[i].textContent;
  }

  function choose(i) {
    input.value = items[i].textContent;
    close();
    form.submit();
  }

  function request(q) {
    if (pending) pending.abort();
    var controller = (pending = new AbortController());
    fetch("/api/suggest?q=" + encodeURIComponent(q), {
      signal: controller.signal,
      headers: { Accept: "application/json" },
    })
      .then(function (response) {
        return response.ok ? response.json() : { suggestions: [] };
      })
      .then(function (answer) {
        if (controller === pending && input.value === q) show(answer.suggestions || []);
      })
      .catch(function (error) {
        if (error.name !== "AbortError") close();
      });
  }

  input.addEventListener("input", function () {
    typed = input.value;
    clearTimeout(timer);
    if (pending) pending.abort();
    if (!typed.trim()) {
      close();
      return;
    }
    timer = setTimeout(request, DEBOUNCE_MS, typed);
  });

  input.addEventListener("keydown", function (event) {
    var open = !list.hidden;
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      if (!open) {
        if (input.value.trim()) request(input.value);
        return;
      }
      var step = event.key === "ArrowDown" ? 1 : -1;
      // past either end: back in the box, with what was typed
      var next = active + step;
      if (active < 0 && step < 0) next = items.length - 1;
      highlight(next >= items.length ? -1 : next);
    } else if (event.key === "Enter" && open && active >= 0) {
      event.preventDefault();
      choose(active);
    } else if (event.key === "Escape" && open) {
      event.preventDefault(); // (a search box would clear itself)
      if (active >= 0) highlight(-1);
      close();
    }
  });

  input.addEventListener("blur", close);
})();
