// Progressive enhancement only: every page works without it. Loaded from /static (CSP script-src 'self').
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // "Select all" on the pending list.
  for (const box of document.querySelectorAll("input[data-select-all]")) {
    box.addEventListener("change", () => {
      const name = box.getAttribute("data-select-all");
      for (const item of box.form.querySelectorAll(`input[type=checkbox][name="${name}"]`)) {
        item.checked = box.checked;
      }
    });
  }
  // A confirmation dialog before a form that cannot be undone; {subject} is the named field's value.
  for (const form of document.querySelectorAll("form[data-confirm]")) {
    form.addEventListener("submit", (event) => {
      const field = form.getAttribute("data-confirm-field");
      const value = field ? document.getElementById(field).value : "";
      const message = form.getAttribute("data-confirm").replace("{subject}", value);
      if (!window.confirm(message)) {
        event.preventDefault();
      }
    });
  }
});
