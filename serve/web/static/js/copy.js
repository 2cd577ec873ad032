// The copy button of a value shown once (a new API key): the button's `data-copy` names the
// input that holds it. The clipboard API first; where the browser refuses it (no permission,
// an insecure origin), the value is selected so Ctrl+C copies it, and the button says so.
function copier(button) {
  const field = document.getElementById(button.dataset.copy);
  if (!field) return;
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(field.value);
      button.textContent = "Copied";
      button.dataset.state = "copied";
    } catch (err) {
      field.focus();
      field.select();
      button.textContent = "Selected: press Ctrl+C";
      button.dataset.state = "selected";
    }
  });
}

for (const button of document.querySelectorAll("button[data-copy]")) copier(button);
