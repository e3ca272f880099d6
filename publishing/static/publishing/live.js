// Live status regions (htmx.min.js polls them): when a poll replaces a form that could only be
// refused now with a notice, copy what was typed into the form into the notice's read-only box,
// so that nothing typed is lost. A static file: the content-security policy allows no inline script.
"use strict";

document.addEventListener("htmx:oobBeforeSwap", (event) => {
  const { target, fragment } = event.detail;
  if (!(target instanceof HTMLFormElement)) return;
  fragment.querySelectorAll("textarea[data-keeps]").forEach((kept) => {
    const typed = target.elements.namedItem(kept.dataset.keeps);
    const text = typed && "value" in typed ? typed.value : "";
    if (text.trim()) {
      kept.value = text;
    } else {
      kept.closest("[data-kept]")?.remove();
    }
  });
});

// A poll replaces its region's content: a folded section (<details data-key>) the reader opened or
// closed stays as the reader left it, rather than as the server renders it.
const foldedState = new WeakMap();

document.addEventListener("htmx:beforeSwap", (event) => {
  const state = new Map();
  event.detail.target.querySelectorAll("details[data-key]").forEach((section) => {
    state.set(section.dataset.key, section.open);
  });
  foldedState.set(event.detail.target, state);
});

document.addEventListener("htmx:afterSwap", (event) => {
  const state = foldedState.get(event.detail.target);
  if (!state) return;
  event.detail.target.querySelectorAll("details[data-key]").forEach((section) => {
    if (state.has(section.dataset.key)) section.open = state.get(section.dataset.key);
  });
});
