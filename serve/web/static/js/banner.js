// The banner on every signed-in page: a delivery channel of the organisation that the
// deliverer disabled after failing in a row (`disabled_at` set, /api/v2/channels) is said
// loudly, with why and when, each linked to its channel page where it is enabled again.
import {get} from "./api.js";

const el = document.getElementById("channel-banner");

async function show() {
  if (!el) return;
  let disabled = [];
  try {
    // An organisation has a handful of channels; 1000 is the first page of any real one.
    const {body} = await get("/api/v2/channels?limit=1000");
    disabled = body.items.filter((c) => c.disabled_at);
  } catch (err) {
    el.dataset.state = "error";  // no banner rather than a wrong one
    return;
  }
  el.dataset.state = "checked";
  el.dataset.disabled = String(disabled.length);
  if (!disabled.length) { el.hidden = true; return; }
  const list = document.createElement("ul");
  for (const c of disabled) {
    const li = document.createElement("li");
    const link = document.createElement("a");
    link.href = "/dashboard/channels/" + encodeURIComponent(c.id);
    link.textContent = c.name;
    link.className = "channel-link";
    li.append(c.kind + " channel \u201c", link, "\u201d");
    li.append(" was disabled at " +
      c.disabled_at.replace("T", " ").slice(0, 16) + " UTC" +
      (c.disabled_reason ? ": " + c.disabled_reason : ""));
    list.append(li);
  }
  const head = document.createElement("strong");
  head.textContent = disabled.length === 1
    ? "Alerts are not being delivered to a channel."
    : "Alerts are not being delivered to " + disabled.length + " channels.";
  const hint = document.createElement("span");
  hint.append(" Fix the receiver, then open the channel and press Enable (",
              Object.assign(document.createElement("a"),
                            {href: "/dashboard/channels", textContent: "Channels"}), ").");
  el.replaceChildren(head, hint, list);
  el.hidden = false;
}

show();

// The unread count beside "Notifications": open (unacknowledged) events, from the API's
// count of the inbox's "not yet" filter.
async function unread() {
  const badge = document.getElementById("unread");
  if (!badge) return;
  try {
    const {body} = await get("/api/v2/notifications?acknowledged=false&limit=1");
    badge.textContent = body.total > 99 ? "99+" : String(body.total);
    badge.title = body.total + " not acknowledged";
    badge.hidden = body.total === 0;
    badge.dataset.count = String(body.total);
  } catch (err) {
    badge.hidden = true;
    badge.dataset.count = "error";
  }
}

unread();
