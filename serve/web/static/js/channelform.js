// The channel forms (serve/web/templates/web/channels.html's new channel, channel.html's
// change): shows the fields of the kind and service chosen (a URL for a web service,
// recipients for email, Telegram's chat id, PagerDuty's key) and hides the others, whose
// values the page does not send. Without script every field shows and the API says which
// ones do not belong.

function sync(form) {
  const kind = form.elements.kind.value;
  const format = form.elements.format ? form.elements.format.value : "standard";
  for (const label of form.querySelectorAll("label[data-kind]")) {
    const shown = label.dataset.kind === kind &&
      (!label.dataset.format || label.dataset.format === format);
    label.hidden = !shown;
    for (const input of label.querySelectorAll("input, textarea, select")) {
      input.disabled = !shown;
    }
  }
  if (form.elements.url) form.elements.url.required = kind === "webhook";
  if (form.elements.recipients) form.elements.recipients.required = kind === "email";
}

for (const id of ["new-channel", "edit-channel"]) {
  const form = document.getElementById(id);
  if (form && form.elements.kind) {
    for (const name of ["kind", "format"]) {
      const field = form.elements[name];
      if (field && field.tagName === "SELECT") field.addEventListener("change", () => sync(form));
    }
    sync(form);
    form.dataset.ready = "1";
  }
}
