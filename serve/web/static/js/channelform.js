// The new-channel form (serve/web/templates/web/channels.html): shows the fields of the kind
// and service chosen (a URL for a web service, recipients for email, Telegram's chat id,
// PagerDuty's key) and hides the others, whose values the page does not send. Without
// script every field shows and the API says which ones do not belong.
const form = document.getElementById("new-channel");

function sync() {
  const kind = form.elements.kind.value;
  const format = form.elements.format.value;
  for (const label of form.querySelectorAll("label[data-kind]")) {
    const shown = label.dataset.kind === kind &&
      (!label.dataset.format || label.dataset.format === format);
    label.hidden = !shown;
    for (const input of label.querySelectorAll("input, textarea, select")) {
      input.disabled = !shown;
    }
  }
  form.elements.url.required = kind === "webhook";
  form.elements.recipients.required = kind === "email";
}

if (form) {
  form.elements.kind.addEventListener("change", sync);
  form.elements.format.addEventListener("change", sync);
  sync();
  form.dataset.ready = "1";
}
