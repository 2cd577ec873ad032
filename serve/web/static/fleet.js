// The device list (serve/web/templates/web/devices.html) sorted by any column: a heading with
// `data-sort` ("text" or "number") becomes a button, and each cell's `data-sort-value` is what
// is compared (the raw value, not the text shown: "3 min ago" sorts by the instant). On a
// narrow screen the headings are hidden (the rows are cards), so the same choice is a select
// above the list. Empty values sort last either way. The choice is not remembered.

const table = document.getElementById("devices");

/** Compare two rows' values of one column; empty last, numbers as numbers. */
export function compare(a, b, kind, direction) {
  if (a === "" || b === "") return a === b ? 0 : (a === "" ? 1 : -1);
  const order = kind === "number" ? Number(a) - Number(b)
    : a.localeCompare(b, undefined, {numeric: true, sensitivity: "base"});
  return direction === "descending" ? -order : order;
}

function sortBy(index, kind, direction) {
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const value = (row) => row.cells[index].dataset.sortValue ?? "";
  rows.sort((r1, r2) => compare(value(r1), value(r2), kind, direction));
  body.append(...rows);
  for (const th of table.tHead.rows[0].cells) th.removeAttribute("aria-sort");
  table.tHead.rows[0].cells[index].setAttribute("aria-sort", direction);
  table.dataset.sorted = index + " " + direction;
  const select = document.getElementById("sort-by");
  if (select) select.value = index + " " + direction;  // the narrow screen's choice agrees
}

if (table) {
  const headings = Array.from(table.tHead.rows[0].cells);
  const sorter = document.createElement("div");
  sorter.className = "sorter";
  const label = document.createElement("label");
  label.textContent = "Sort by ";
  const select = document.createElement("select");
  select.id = "sort-by";
  label.append(select);
  sorter.append(label);
  headings.forEach((th, index) => {
    const kind = th.dataset.sort;
    if (!kind) return;
    const button = document.createElement("button");
    button.type = "button";
    button.className = "sort";
    button.textContent = th.textContent;
    th.textContent = "";
    th.append(button);
    button.addEventListener("click", () => {
      const direction = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
      sortBy(index, kind, direction);
    });
    for (const direction of ["ascending", "descending"]) {
      const option = document.createElement("option");
      option.value = index + " " + direction;
      option.textContent = button.textContent + (direction === "ascending" ? " ↑" : " ↓");
      select.append(option);
    }
  });
  select.addEventListener("change", () => {
    const [index, direction] = select.value.split(" ");
    sortBy(Number(index), headings[Number(index)].dataset.sort, direction);
  });
  table.before(sorter);
}
