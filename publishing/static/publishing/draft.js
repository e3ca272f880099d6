// The edit page's working draft (docs/editorial.md#draft): autosave a second after typing stops,
// keep unsaved text in this browser (localStorage) so a crash or a closed tab loses nothing, show a
// draft saved meanwhile elsewhere at once, show the saved draft's preview as the server rendered it
// (the page renders no Markdown itself), and send the heartbeat that tells others who is here.
// A static file: the content-security policy allows no inline script. Without it the form's
// "Save draft" and "Submit for review" buttons do the same by plain POST.
"use strict";

const SAVE_AFTER_MS = 1000;
const HEARTBEAT_MS = 10000;
const TYPING_HEARTBEAT_MS = 3000;

const form = document.getElementById("draft-form");
if (form) {
  const fields = Array.from(form.querySelectorAll("[data-draft]"));
  const version = form.elements.namedItem("draft_version");
  const base = form.elements.namedItem("base_number");
  const csrf = form.elements.namedItem("csrfmiddlewaretoken").value;
  const status = document.getElementById("draft-status");
  const conflictBox = document.getElementById("draft-conflict");
  const holderBox = document.getElementById("draft-holder");
  const storageKey = `galley:draft:${form.dataset.brief}:${form.dataset.user}`;
  let saveTimer = null;
  let inFlight = null;
  let typedSinceBeat = false;
  let lastTypingBeat = 0;
  let held = !holderBox.hidden; // another editor holds the draft: no saves until taking over
  let conflict = false; // a draft saved meanwhile is shown: no saves until the editor chooses
  let holds = form.dataset.holds === "1";
  let tookOverBy = ""; // who took the draft over from this page, said until it takes over back
  let theirs = null;

  // A checkbox (the correction mark) counts as the form sends it: "1" when ticked, "" when not.
  const valueOf = (field) => (field.type === "checkbox" ? (field.checked ? "1" : "") : field.value);
  const story = () => Object.fromEntries(fields.map((field) => [field.dataset.draft, valueOf(field)]));
  const sameStory = (a, b) => fields.every((field) => (a[field.dataset.draft] || "") === (b[field.dataset.draft] || ""));
  const fill = (values) => fields.forEach((field) => {
    const value = values[field.dataset.draft] || "";
    if (field.type === "checkbox") field.checked = value === "1"; else field.value = value;
  });
  const clock = (date) => date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  const say = (state, text) => { status.dataset.state = state; status.textContent = text; };
  // The server's own rendering of the partial (publishing/_story_preview.html): its body was cleaned there.
  const preview = document.getElementById("draft-preview");
  const showPreview = (saved) => { if (saved.preview) preview.innerHTML = saved.preview; };

  const keep = () => {
    const entry = { story: story(), version: Number(version.value || 0), base: base.value, typedAt: Date.now() };
    try { localStorage.setItem(storageKey, JSON.stringify(entry)); } catch (_full) { /* the server copy still saves */ }
  };
  const kept = () => {
    try { return JSON.parse(localStorage.getItem(storageKey) || "null"); } catch (_bad) { return null; }
  };
  const forget = () => localStorage.removeItem(storageKey);

  const post = (url, body) => fetch(url, {
    method: "POST", body, credentials: "same-origin",
    headers: { Accept: "application/json", "X-CSRFToken": csrf },
  });

  const showConflict = (message, other, mine) => {
    conflict = true;
    theirs = other;
    document.getElementById("draft-conflict-text").textContent = message;
    const rows = document.getElementById("draft-conflict-fields");
    rows.replaceChildren(...fields.map((field) => {
      const name = field.dataset.draft;
      const row = document.createElement("tr");
      row.dataset.field = name;
      const label = document.createElement("th");
      label.textContent = form.querySelector(`label[for="${field.id}"]`).textContent;
      const theirCell = document.createElement("td");
      theirCell.textContent = other.story[name] || "";
      const myCell = document.createElement("td");
      myCell.textContent = mine[name] || "";
      if ((other.story[name] || "").trim() !== (mine[name] || "").trim()) row.className = "differs";
      row.append(label, theirCell, myCell);
      return row;
    }));
    conflictBox.hidden = false;
    say("conflict", "Not saved: the draft was saved elsewhere meanwhile. Choose below; your text is kept.");
  };

  const save = async () => {
    saveTimer = null;
    if (held || conflict) return;
    if (inFlight) { schedule(); return; }
    const sent = story();
    const body = new FormData(form);
    say("saving", "Saving…");
    inFlight = post(form.dataset.saveUrl, body).then(async (response) => {
      const answer = await response.json().catch(() => ({ message: `The server answered ${response.status}.` }));
      if (response.ok) {
        version.value = answer.saved.version;
        holds = true;
        showPreview(answer.saved);
        if (sameStory(sent, story())) {
          forget();
          say("saved", `Draft saved, ${clock(new Date(answer.saved.updated_at))}.`);
        } else {
          keep();
          schedule();
        }
      } else if (response.status === 409) {
        showConflict(answer.message, answer.theirs, story());
      } else if (response.status === 423) {
        held = true;
        showHolder(`${answer.holder} is editing this draft: your changes are not saved until you take over.`);
        say("held", "Not saved: kept in this browser until you take over.");
      } else {
        say("error", `Not saved: ${answer.message} Your text is kept in this browser.`);
      }
    }).catch(() => {
      say("error", "Not saved: the server cannot be reached. Your text is kept in this browser; retrying.");
      schedule(HEARTBEAT_MS);
    }).finally(() => { inFlight = null; });
    await inFlight;
  };
  const schedule = (after = SAVE_AFTER_MS) => {
    clearTimeout(saveTimer);
    saveTimer = setTimeout(save, after);
  };

  const showHolder = (text) => {
    document.getElementById("draft-holder-text").textContent = text;
    holderBox.hidden = false;
  };

  const heartbeat = async (typing) => {
    const body = new FormData();
    body.append("typing", typing ? "1" : "0");
    typedSinceBeat = false;
    try {
      const response = await post(form.dataset.presenceUrl, body);
      if (!response.ok) return;
      const answer = await response.json();
      document.getElementById("draft-presence").innerHTML = answer.html;
      if (answer.held_by) {
        if (holds && !held) {
          tookOverBy = answer.held_by;
          say("held", "Not saved since the take-over: your text is kept in this browser.");
        }
        held = true;
        holds = false;
        clearTimeout(saveTimer);
        showHolder(tookOverBy === answer.held_by
          ? `${answer.held_by} took over editing. Your changes are not saved until you take over again.`
          : `${answer.held_by} is editing this draft: your changes are not saved until you take over.`);
      } else if (held) {
        // The holder's page closed (its presence lapsed): nothing holds the draft any more.
        held = false;
        holderBox.hidden = true;
        if (kept()) schedule();
      }
    } catch (_offline) { /* the next heartbeat tries again */ }
  };

  form.addEventListener("input", () => {
    keep();
    typedSinceBeat = true;
    if (held) {
      say("held", "Not saved: kept in this browser until you take over.");
    } else if (!conflict) {
      say("unsaved", "Unsaved changes…");
      schedule();
    }
    if (Date.now() - lastTypingBeat > TYPING_HEARTBEAT_MS) {
      lastTypingBeat = Date.now();
      heartbeat(true);
    }
  });

  form.addEventListener("submit", (event) => {
    // The form's POST names the draft's version: one it is about to save first is waited for.
    if (inFlight) {
      event.preventDefault();
      const submitter = event.submitter;
      inFlight.then(() => form.requestSubmit(submitter));
      return;
    }
    clearTimeout(saveTimer);
    forget();
  });

  document.getElementById("take-over-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const response = await post(form.dataset.takeOverUrl, new FormData());
    if (!response.ok) return;
    const answer = await response.json();
    held = false;
    holds = true;
    tookOverBy = "";
    holderBox.hidden = true;
    if (!conflict && Number(version.value || 0) !== answer.version) {
      // The other editor saved after this page did: their text is shown beside this one, to choose.
      if (!sameStory(answer.story, story())) {
        showConflict("The draft was saved by the other editor before you took over.", answer, story());
        return;
      }
      version.value = answer.version;
    }
    say("unsaved", "You took over editing; saving…");
    schedule(0);
  });

  document.getElementById("take-theirs").addEventListener("click", () => {
    fill(theirs.story);
    showPreview(theirs);
    version.value = theirs.version;
    base.value = theirs.base_number;
    conflict = false;
    conflictBox.hidden = true;
    forget();
    say("saved", `Took the draft saved by ${theirs.updated_by}.`);
  });

  document.getElementById("keep-mine").addEventListener("click", () => {
    // Saving over theirs, said in so many words: the next save names their version. The base
    // stays the revision this text started from, so a submission since is still shown at submit.
    version.value = theirs.version;
    conflict = false;
    conflictBox.hidden = true;
    keep();
    schedule(0);
  });

  // Text typed here and never saved (a crash, a closed tab): back in the form, and said so.
  const entry = kept();
  if (entry && !sameStory(entry.story, story())) {
    const serverVersion = Number(version.value || 0);
    if (entry.version >= serverVersion) {
      fill(entry.story);
      const restored = document.getElementById("draft-restored");
      restored.textContent = `Restored your unsaved text from this browser (typed ${clock(new Date(entry.typedAt))}); saving it now.`;
      restored.hidden = false;
      schedule(0);
    } else {
      showConflict(
        "This browser kept text you had not saved, and the draft was saved elsewhere since. Choose which to keep.",
        { story: story(), version: serverVersion, base_number: base.value, updated_by: "the server" },
        entry.story,
      );
      fill(entry.story);
    }
  } else if (entry) {
    forget();
  }

  heartbeat(false);
  setInterval(() => heartbeat(typedSinceBeat), HEARTBEAT_MS);
  // Going elsewhere or closing the tab: others stop seeing this editor at once, not a minute later.
  // (A crash sends nothing; its presence lapses by itself.)
  window.addEventListener("pagehide", () => {
    const body = new FormData();
    body.append("csrfmiddlewaretoken", csrf);
    body.append("leaving", "1");
    navigator.sendBeacon(form.dataset.presenceUrl, body);
  });
}
