// The result of "Send a test" on a channel's page: polls the channel
// (GET /api/v2/channels/{id}, with the cookie) until its newest delivery is the test event and
// an attempt has ended, then shows what the receiver (HTTP status line and the start of its
// body) or the SMTP server answered, or why it failed. Gives up waiting after two minutes
// (the deliverer is down: the test stays queued and the page says so).
import {get} from "./api.js";

const el = document.getElementById("test-result");
const WAIT_MS = 120000;
const EVERY_MS = 1000;

function show(state, text) {
  el.dataset.state = state;
  el.textContent = text;
  el.className = state === "delivered" ? "notice ok" : state === "failed" ? "error" : "notice";
}

async function poll(started) {
  let d = null;
  try {
    const {body} = await get("/api/v2/channels/" + encodeURIComponent(el.dataset.channel));
    d = body.last_delivery;
  } catch (err) {
    show("error", "Could not read the channel: " + err.message);
    return;
  }
  if (d && d.event_id === el.dataset.event && d.attempts > 0) {
    if (d.state === "delivered") {
      show("delivered", "Test delivered. Answer: " + (d.answer || "(none)"));
    } else {
      show("failed", "Test failed (attempt " + d.attempts + "): " + (d.error || "") +
        (d.answer ? ". Answer: " + d.answer : "") +
        (d.state === "pending" ? ". It is tried again." : ""));
    }
    return;
  }
  if (Date.now() - started > WAIT_MS) {
    show("waiting", "No answer yet: the test is queued. Is the deliverer (alerts-deliver) running?");
    return;
  }
  setTimeout(() => poll(started), EVERY_MS);
}

if (el) poll(Date.now());
