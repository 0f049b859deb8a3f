// The writegate approval page: sign in with an API key, chat with the agent, and
// decide its proposals. Plain browser JavaScript, no build step. Everything shown
// comes from the API; text is always set with textContent, never parsed as HTML.
"use strict";

const KEY_STORE = "writegate.key";
const THREAD_STORE = "writegate.thread";
const STATUS_LABELS = {
  awaiting_confirmation: "Awaiting your decision",
  awaiting_second_approval: "Waiting for a second approver",
  confirmed: "Confirmed",
  executed: "Executed",
  declined: "Declined",
  cancelled: "Cancelled",
  expired: "Expired",
  superseded: "Replaced by an edit",
  revoked: "Revoked",
};

const state = {
  key: null,
  thread: null,
  roles: [],
  clockOffsetMs: 0,
  cards: new Map(),
  live: new Map(),
  reviews: new Map(),
};
const OPEN = ["awaiting_confirmation", "awaiting_second_approval", "confirmed"];
const $ = (selector, root = document) => root.querySelector(selector);

// -- talking to the API ------------------------------------------------------------

function headers(extra = {}) {
  return { Authorization: `Bearer ${state.key}`, "Content-Type": "application/json", ...extra };
}

async function call(method, path, body, extra) {
  let res;
  try {
    res = await fetch(path, {
      method,
      headers: headers(extra),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    const data = { code: "network_error", message: "the server could not be reached", retryable: true };
    return { ok: false, status: 0, data };
  }
  let data = null;
  try {
    data = await res.json();
  } catch (err) {
    data = { code: "bad_response", message: `unexpected answer (${res.status})`, retryable: true };
  }
  if (res.status === 401) signOut("Your key is no longer valid; sign in again.");
  return { ok: res.ok, status: res.status, data };
}

// A click's idempotency key. crypto.randomUUID needs a secure context; this does not.
function newKey() {
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return "click-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function setClock(serverNow) {
  if (serverNow) state.clockOffsetMs = Date.parse(serverNow) - Date.now();
}

function serverNowMs() {
  return Date.now() + state.clockOffsetMs;
}

function describeError(data) {
  if (!data) return "something went wrong";
  return data.code ? `${data.code}: ${data.message}` : String(data.message || data);
}

// -- sign in and threads -----------------------------------------------------------

async function signIn(key) {
  state.key = key;
  const me = await call("GET", "/v1/me");
  if (!me.ok) {
    state.key = null;
    sessionStorage.removeItem(KEY_STORE);
    $("#login-error").textContent = describeError(me.data);
    showLogin();
    return;
  }
  sessionStorage.setItem(KEY_STORE, key);
  state.roles = me.data.roles;
  $("#who").textContent = `${me.data.user_id} · ${me.data.tenant_id}`;
  $("#who").hidden = false;
  $("#logout").hidden = false;
  $("#login").hidden = true;
  $("#app").hidden = false;
  $("#reviews").hidden = !state.roles.includes("approver");
  await loadThreads();
  if (state.roles.includes("approver")) await loadReviews();
}

function showLogin() {
  $("#login").hidden = false;
  $("#app").hidden = true;
  $("#who").hidden = true;
  $("#logout").hidden = true;
}

function signOut(message) {
  state.key = null;
  sessionStorage.removeItem(KEY_STORE);
  sessionStorage.removeItem(THREAD_STORE);
  $("#login-error").textContent = message || "";
  showLogin();
}

async function loadThreads(preferred) {
  const r = await call("GET", "/v1/threads");
  if (!r.ok) return;
  let threads = r.data.threads;
  let current = preferred || sessionStorage.getItem(THREAD_STORE);
  if (!threads.some((t) => t.thread_id === current)) current = threads.length ? threads[0].thread_id : null;
  if (!current) {
    const made = await call("POST", "/v1/threads");
    if (!made.ok) return;
    threads = [made.data];
    current = made.data.thread_id;
  }
  const select = $("#threads");
  select.replaceChildren(
    ...threads.map((t) => {
      const option = document.createElement("option");
      option.value = t.thread_id;
      option.textContent = `${new Date(t.created_at).toLocaleString()} · ${t.thread_id}`;
      return option;
    }),
  );
  select.value = current;
  await openThread(current);
}

async function openThread(threadId) {
  state.thread = threadId;
  sessionStorage.setItem(THREAD_STORE, threadId);
  state.cards.clear();
  state.live.clear();
  $("#cards").replaceChildren();
  $("#messages").replaceChildren();
  $("#chat-error").textContent = "";
  const r = await call("GET", `/v1/threads/${encodeURIComponent(threadId)}`);
  if (!r.ok || state.thread !== threadId) return; // another thread was opened meanwhile
  setClock(r.data.now);
  r.data.messages.forEach(renderMessage);
  r.data.approvals.forEach((a) => upsertCard(a));
  refreshEmpty();
  $("#app").dataset.loadedThread = threadId;
}

// -- messages ----------------------------------------------------------------------

function toolSummary(message) {
  try {
    const body = JSON.parse(message.content);
    if (body.code && !body.status) return `${message.name}: ${body.code}`;
    return `${message.name}: ${body.status || "ok"}`;
  } catch (err) {
    return `${message.name}: ${message.content.slice(0, 80)}`;
  }
}

function renderMessage(message) {
  const list = $("#messages");
  if (message.role === "assistant" && message.tool_calls.length) {
    for (const c of message.tool_calls) {
      const args = Object.entries(c.args).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ");
      const edited = c.edited && c.edited.length ? ` (edited by the approver: ${c.edited.join(", ")})` : "";
      appendLine(list, "tool-call", `→ ${c.name}(${args})${edited}`);
    }
  }
  if (message.role === "tool") {
    appendLine(list, "tool-result", `← ${toolSummary(message)}`);
    return;
  }
  if (!message.content) return;
  const live = message.id && state.live.get(message.id);
  if (live) {
    live.textContent = message.content;
    state.live.delete(message.id);
    return;
  }
  appendLine(list, message.role === "user" ? "user" : "assistant", message.content);
}

function appendLine(list, kind, text) {
  const item = document.createElement("li");
  item.className = `msg ${kind}`;
  item.textContent = text;
  list.append(item);
  item.scrollIntoView({ block: "end" });
  return item;
}

function onToken(data) {
  let bubble = state.live.get(data.message_id);
  if (!bubble) {
    bubble = appendLine($("#messages"), "assistant", "");
    state.live.set(data.message_id, bubble);
  }
  bubble.textContent += data.delta;
}

// Reads a turn's events; returns the last event's id and whether the turn's last event
// (`end` or `error`) arrived. A stream that stops before it was cut off.
async function readEvents(res, onEvent, lastId) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let finished = false;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let event = "message";
        let data = "";
        let id = null;
        for (const line of block.split("\n")) {
          if (line.startsWith("event: ")) event = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
          else if (line.startsWith("id: ")) id = line.slice(4);
        }
        if (!data) continue; // a keep-alive comment
        if (id !== null) lastId = id;
        if (event === "end" || event === "error") finished = true;
        onEvent(event, JSON.parse(data));
      }
    }
  } catch (err) {
    // the connection broke mid-turn: the caller asks for the rest
  }
  return { lastId, finished };
}

const RECONNECTS = 5;

// The rest of a turn after a lost connection: the events after `lastId`, none twice.
async function resumeEvents(threadId, onEvent, lastId) {
  let finished = false;
  for (let attempt = 0; attempt < RECONNECTS && !finished && lastId; attempt++) {
    let res;
    try {
      res = await fetch(`/v1/threads/${encodeURIComponent(threadId)}/events`, {
        headers: headers({ "Last-Event-ID": lastId }),
      });
    } catch (err) {
      continue;
    }
    if (!res.ok) break;
    ({ lastId, finished } = await readEvents(res, onEvent, lastId));
  }
  return finished;
}

async function sendMessage(text) {
  const threadId = state.thread;
  $("#chat-error").textContent = "";
  setComposer(false);
  appendLine($("#messages"), "user", text);
  try {
    const res = await fetch(`/v1/threads/${encodeURIComponent(threadId)}/messages`, {
      method: "POST",
      headers: headers(),
      body: JSON.stringify({ content: text }),
    });
    if (!res.ok) {
      const data = await res.json().catch(() => null);
      if (res.status === 401) signOut("Your key is no longer valid; sign in again.");
      $("#chat-error").textContent = describeError(data);
      return;
    }
    const onEvent = (event, data) => {
      if (event === "token") onToken(data);
      else if (event === "message" && data.role !== "user") renderMessage(data);
      else if (event === "approval") upsertCard(data);
      else if (event === "end") data.pending.forEach((a) => upsertCard(a));
      else if (event === "error") $("#chat-error").textContent = describeError(data);
    };
    const { lastId, finished } = await readEvents(res, onEvent, null);
    if (!finished && !(await resumeEvents(threadId, onEvent, lastId))) {
      $("#chat-error").textContent = "the connection broke; reload to see where the conversation stands";
    }
  } catch (err) {
    $("#chat-error").textContent = "the connection broke; reload to see where the conversation stands";
  } finally {
    setComposer(true);
    refreshEmpty();
  }
}

function setComposer(enabled) {
  $("#send").disabled = !enabled;
  $("#message").disabled = !enabled;
  // Back to the message box as a turn ends, unless the person is typing elsewhere (a
  // card's re-typed amount, an edit): their keystrokes stay where they put them.
  const typing = document.activeElement && document.activeElement.matches("input, textarea, select");
  if (enabled && !typing) $("#message").focus();
}

// -- approval cards ----------------------------------------------------------------

function upsertCard(approval) {
  let card = state.cards.get(approval.proposal_id);
  if (!card) {
    card = buildCard(approval);
    state.cards.set(approval.proposal_id, card);
    $("#cards").prepend(card.el);
  }
  // A card that already shows its final answer keeps it; only its status follows.
  card.approval = { ...card.approval, ...approval };
  renderCard(card);
  if (approval.execution_id && !card.receiptShown) loadReceipt(card, approval.execution_id);
  refreshEmpty();
  return card;
}

function buildCard(approval) {
  const el = $("#card-template").content.firstElementChild.cloneNode(true);
  const card = { el, approval, busy: false, keys: {}, receiptShown: false };
  el.dataset.proposalId = approval.proposal_id;
  $(".title", el).textContent = approval.title;
  $(".operation", el).textContent = approval.operation;
  $(".target", el).textContent = approval.target;
  const rows = approval.fields.map((f) => {
    const row = document.createElement("tr");
    const name = document.createElement("th");
    name.textContent = f.label || f.name;
    name.title = f.name;
    const value = document.createElement("td");
    value.textContent = f.display;
    value.className = `field-${f.name}`;
    row.append(name, value);
    return row;
  });
  $(".fields tbody", el).replaceChildren(...rows);
  $(".impact", el).textContent = approval.impact ? `Impact: ${approval.impact}` : "";
  const flags = [];
  if (approval.irreversible) flags.push("Irreversible");
  if (approval.external) flags.push("Reaches an external system");
  $(".flags", el).textContent = flags.join(" · ");
  $(".flags", el).classList.toggle("warn", approval.irreversible);
  $(".asked-by", el).textContent = approval.requested_by;
  $(".asked-at", el).textContent = approval.created_at ? new Date(approval.created_at).toLocaleString() : "";
  $(".thread", el).textContent = approval.thread_id;
  $(".proposal-id", el).textContent = approval.proposal_id;
  $(".copy-id", el).addEventListener("click", () => copyText($(".copy-id", el), approval.proposal_id));
  const tier = approval.confirmation;
  if (tier) {
    $(".tier", el).textContent = tier.summary || tier.tier.replaceAll("_", " ");
    $(".tier", el).title = tier.reasons.join("; ");
    if (tier.retype_field) $(".retype-hint", el).textContent = `To confirm, ${tier.retype_hint}`;
  }
  $(".confirm", el).addEventListener("click", () => decide(card, "confirm"));
  $(".decline", el).addEventListener("click", () => decide(card, "decline"));
  $(".edit", el).addEventListener("click", () => openEdit(card));
  $(".cancel-edit", el).addEventListener("click", () => closeEdit(card));
  $(".edit-form", el).addEventListener("submit", (event) => {
    event.preventDefault();
    submitEdit(card);
  });
  return card;
}

function copyText(button, text) {
  const done = () => { button.textContent = "Copied"; };
  if (navigator.clipboard) navigator.clipboard.writeText(text).then(done, () => {});
}

function isOpen(card) {
  const a = card.approval;
  return OPEN.includes(a.status) && a.pending;
}

function statusLabel(approval) {
  if (approval.status === "confirmed" && approval.pending && approval.second_approver) {
    return `Approved by ${approval.second_approver}`;
  }
  return STATUS_LABELS[approval.status] || approval.status;
}

function noteFor(approval) {
  if (!approval.pending) return "";
  if (approval.status === "awaiting_second_approval") {
    return "You confirmed. An approver of your tenant must now approve this exact preview; " +
      "this card updates when they have.";
  }
  if (approval.status === "confirmed" && approval.second_approver) {
    return `${approval.second_approver} approved. Confirm once more to run it.`;
  }
  return "";
}

function renderCard(card) {
  const { el, approval } = card;
  el.dataset.status = approval.status;
  $(".status", el).textContent = statusLabel(approval);
  const open = isOpen(card) && !card.review;
  $(".actions", el).hidden = !open;
  if (!open) $(".edit-form", el).hidden = true;
  const note = noteFor(approval);
  $(".note", el).textContent = note;
  $(".note", el).hidden = !note || card.review;
  const retype = approval.confirmation && approval.confirmation.retype_field;
  $(".retype", el).hidden = !(open && retype && approval.status === "awaiting_confirmation");
  // While a second approver decides there is nothing to confirm or edit; declining stays.
  const waiting = approval.status === "awaiting_second_approval";
  $(".confirm", el).hidden = waiting;
  $(".edit", el).hidden = waiting;
  if (card.review) {
    $(".review-actions", el).hidden = card.answered || approval.status !== "awaiting_second_approval";
  }
  for (const button of el.querySelectorAll("button")) button.disabled = card.busy;
  if (approval.error && open) showRefusal(card, approval.error);
  tick(card);
}

function tick(card) {
  const { el, approval } = card;
  const countdown = $(".countdown", el);
  if (!OPEN.includes(approval.status)) {
    countdown.textContent = approval.status === "expired" ? `Expired at ${new Date(approval.expires_at).toLocaleTimeString()}` : "";
    return;
  }
  const left = Date.parse(approval.expires_at) - serverNowMs();
  if (left <= 0) {
    // The server's clock decides; at the instant of expiry nothing can be confirmed.
    card.approval = { ...approval, status: "expired", pending: false };
    renderCard(card);
    return;
  }
  const seconds = Math.ceil(left / 1000);
  const mm = Math.floor(seconds / 60);
  const ss = String(seconds % 60).padStart(2, "0");
  countdown.textContent = `Expires in ${mm}:${ss}`;
}

function showRefusal(card, error) {
  const p = $(".refusal", card.el);
  p.textContent = describeError(error);
  p.hidden = false;
}

function showResult(card, kind, lines) {
  const box = $(".result", card.el);
  box.dataset.kind = kind;
  box.replaceChildren(
    ...lines.map(([cls, text]) => {
      const p = document.createElement("p");
      p.className = cls;
      p.textContent = text;
      return p;
    }),
  );
  box.hidden = false;
  $(".refusal", card.el).hidden = true;
}

function showReceipt(card, receipt) {
  card.receiptShown = true;
  const amount = receipt.result && receipt.result.amount_display;
  showResult(card, "receipt", [
    ["headline", `Done: ${receipt.status}${amount ? ` (${amount})` : ""}`],
    ["execution-id", `Execution ${receipt.execution_id}`],
    ["provider-ref", receipt.provider_ref ? `Provider reference ${receipt.provider_ref}` : ""],
    ["completed", receipt.completed_at ? `Completed ${new Date(receipt.completed_at).toLocaleString()}` : ""],
  ].filter(([, text]) => text));
}

async function loadReceipt(card, executionId) {
  card.receiptShown = true;
  const r = await call("GET", `/v1/executions/${encodeURIComponent(executionId)}`);
  if (r.ok) showReceipt(card, r.data);
  else showResult(card, "refusal", [["headline", describeError(r.data)]]);
}

function setBusy(card, busy) {
  card.busy = busy;
  card.el.classList.toggle("busy", busy);
  for (const button of card.el.querySelectorAll("button")) button.disabled = busy;
}

async function decide(card, action, extra = {}) {
  if (card.busy || !isOpen(card)) return; // a second click while the first is in flight
  if (action === "confirm" && !$(".retype", card.el).hidden) {
    extra = { ...extra, retyped: $(".retype-input", card.el).value };
  }
  setBusy(card, true);
  // One key per intent: a retry of the same click sends the same key; an edit, or a
  // confirm with a different re-typed value, is a new intent.
  const intent = action === "confirm" ? `confirm:${extra.retyped || ""}` : action;
  const key = action === "edit" ? newKey() : (card.keys[intent] ||= newKey());
  const r = await call("POST", `/v1/approvals/${encodeURIComponent(card.approval.proposal_id)}/decision`,
    { action, ...extra }, { "Idempotency-Key": key });
  setBusy(card, false);
  if (r.ok) applyDecision(card, r.data);
  else applyRefusal(card, r.data);
}

function applyDecision(card, result) {
  card.approval = { ...card.approval, ...result.approval };
  renderCard(card);
  if (result.outcome === "executed") showReceipt(card, result.receipt);
  else if (result.outcome === "awaiting_second_approval" || result.outcome === "unchanged") {
    $(".refusal", card.el).hidden = true;
  } else if (result.outcome === "edited") {
    showResult(card, "edited", [["headline", "Replaced by the edited proposal"]]);
    if (result.next_approval) upsertCard(result.next_approval);
  } else {
    showResult(card, "ended", [["headline", `${STATUS_LABELS[result.outcome]}: nothing was executed`]]);
  }
  result.messages.filter((m) => m.role !== "user").forEach(renderMessage);
  result.pending.forEach((a) => upsertCard(a));
}

function applyRefusal(card, error) {
  if (error && error.state) {
    card.approval = { ...card.approval, ...error.state };
    renderCard(card);
  }
  if (error && error.retryable && isOpen(card)) {
    showRefusal(card, error); // still open: the buttons stay, a retry reuses the key
    return;
  }
  if (error && error.state && error.state.execution_id && !error.retryable) {
    loadReceipt(card, error.state.execution_id);
    return;
  }
  if (isOpen(card)) showRefusal(card, error);
  else showResult(card, "refusal", [["headline", `Refused: ${describeError(error)}`]]);
}

// -- editing -----------------------------------------------------------------------

function openEdit(card) {
  const form = $(".edit-form", card.el);
  const inputs = card.approval.fields.map((f) => {
    const label = document.createElement("label");
    label.textContent = f.currency ? `${f.label || f.name} (${f.currency})` : f.label || f.name;
    let input;
    if (f.options) {
      input = document.createElement("select");
      for (const option of f.options) {
        const item = document.createElement("option");
        item.value = option;
        item.textContent = option.replaceAll("_", " ");
        item.selected = option === f.value;
        input.append(item);
      }
      input.dataset.kind = "string";
    } else {
      input = document.createElement("input");
      // an amount is edited as shown, in major units; the server converts it exactly
      input.dataset.kind = f.edit_value != null ? "string" : typeof f.value;
      input.value = f.edit_value ?? (typeof f.value === "string" ? f.value : JSON.stringify(f.value));
      if (f.edit_value != null) input.inputMode = "decimal";
    }
    input.name = f.name;
    if (!f.editable) {
      input.disabled = true; // the target's id: another id would be another operation
      input.dataset.fixed = JSON.stringify(f.value);
    }
    label.append(input);
    return label;
  });
  $(".edit-fields", form).replaceChildren(...inputs);
  form.hidden = false;
  $(".actions", card.el).hidden = true;
}

function closeEdit(card) {
  $(".edit-form", card.el).hidden = true;
  renderCard(card);
}

function submitEdit(card) {
  const args = {};
  for (const input of card.el.querySelectorAll(".edit-fields input, .edit-fields select")) {
    if (input.dataset.fixed !== undefined) {
      args[input.name] = JSON.parse(input.dataset.fixed);
      continue;
    }
    if (input.dataset.kind === "string") {
      args[input.name] = input.value;
      continue;
    }
    try {
      args[input.name] = JSON.parse(input.value);
    } catch (err) {
      showRefusal(card, { code: "validation_failed", message: `${input.name} is not a valid value` });
      return;
    }
  }
  $(".edit-form", card.el).hidden = true;
  decide(card, "edit", { args });
}

function refreshEmpty() {
  $("#no-cards").hidden = state.cards.size > 0;
  $("#no-reviews").hidden = state.reviews.size > 0;
}

// -- second approvals (keys with the approver role) ----------------------------------

async function loadReviews() {
  const r = await call("GET", "/v1/reviews");
  if (!r.ok) return;
  setClock(r.data.now);
  for (const approval of r.data.approvals) {
    if (state.reviews.has(approval.proposal_id)) continue;
    const card = buildCard(approval);
    card.review = true;
    const el = card.el;
    el.classList.add("review");
    $(".requester", el).textContent = `Requested by ${approval.requested_by}`;
    $(".requester", el).hidden = false;
    $(".review-actions", el).hidden = false;
    $(".approve", el).addEventListener("click", () => answerReview(card, "approve"));
    $(".reject", el).addEventListener("click", () => answerReview(card, "decline"));
    state.reviews.set(approval.proposal_id, card);
    renderCard(card);
    $("#review-cards").prepend(el);
  }
  refreshEmpty();
}

async function answerReview(card, action) {
  if (card.busy) return;
  setBusy(card, true);
  const r = await call("POST", `/v1/reviews/${encodeURIComponent(card.approval.proposal_id)}`, { action });
  setBusy(card, false);
  card.answered = true;
  if (!r.ok) {
    showResult(card, "refusal", [["headline", `Refused: ${describeError(r.data)}`]]);
    return;
  }
  card.approval = { ...card.approval, ...r.data.approval, pending: false };
  renderCard(card);
  const text = r.data.outcome === "approved"
    ? "Approved: the requester's next confirm runs it"
    : "Declined: it will not run";
  showResult(card, "review", [["headline", text]]);
}

// A card waiting on someone else follows the ledger until that person has answered.
async function followWaitingCards() {
  for (const card of state.cards.values()) {
    if (card.approval.status !== "awaiting_second_approval" || card.busy) continue;
    const r = await call("GET", `/v1/approvals/${encodeURIComponent(card.approval.proposal_id)}`);
    if (!r.ok) continue;
    if (r.data.status === "awaiting_second_approval") upsertCard(r.data);
    // The approver decided, and the service resumed this thread: show its receipt and
    // the model's answer, without a click.
    else if (state.thread) return openThread(state.thread);
  }
}

// -- wiring ------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    $("#login-error").textContent = "";
    signIn($("#api-key").value.trim());
  });
  $("#logout").addEventListener("click", () => signOut(""));
  $("#threads").addEventListener("change", (event) => openThread(event.target.value));
  $("#new-thread").addEventListener("click", async () => {
    const made = await call("POST", "/v1/threads");
    if (made.ok) await loadThreads(made.data.thread_id);
  });
  $("#composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("#message").value.trim();
    if (!text) return;
    $("#message").value = "";
    sendMessage(text);
  });
  setInterval(() => [...state.cards.values(), ...state.reviews.values()].forEach(tick), 250);
  setInterval(() => state.key && followWaitingCards(), 2000);
  $("#refresh-reviews").addEventListener("click", () => loadReviews());
  const saved = sessionStorage.getItem(KEY_STORE);
  if (saved) signIn(saved);
  else showLogin();
});
