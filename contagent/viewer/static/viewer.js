// contagent view: copy the rollout id, submit filters on change, notice new rollouts.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  for (const button of document.querySelectorAll("button.copy")) {
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(button.dataset.copy);
        button.textContent = "copied";
      } catch (err) {
        window.getSelection().selectAllChildren(document.getElementById("rid"));
        button.textContent = "selected: press Ctrl+C";
      }
    });
  }
  const form = document.getElementById("filters");
  if (form) {
    for (const select of form.querySelectorAll("select")) {
      select.addEventListener("change", () => form.submit());
    }
  }
  const body = document.body;
  if (body.dataset.live === "yes" && body.dataset.generation !== "") {
    const note = document.getElementById("live-note");
    setInterval(async () => {
      try {
        const state = await (await fetch("/api/state")).json();
        if (String(state.generation) !== body.dataset.generation) note.hidden = false;
      } catch (err) {
        // the viewer stopped; keep the page as it is
      }
    }, 3000);
  }
});
