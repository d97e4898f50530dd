"""A bokeh DataTable rendered while its element is out of the document (JupyterLab's cells
scrolled out of view) must show its rows once the element is back, with a clean console.

The page loads BokehJS exactly as the explorers send it to JupyterLab
(``widgets._display._bokehjs_load_js``); the same page without the fix that loader
carries shows the fault, so these tests stay tied to what they guard: if a BokehJS
release stops throwing, ``test_unpatched_bokehjs_still_needs_the_fix`` says the fix can go.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.requires_widgets]

ROWS = {"size": [3, 1, 2], "name": ["alpha", "bravo", "charlie"]}

# Renders the table into an element that is not in the document, the way jupyter_bokeh
# renders a BokehModel (``add_document_standalone`` into the widget's element), and
# puts the element into the page ``attach_after_ms`` later (before rendering if < 0). ``change_while_out`` then
# takes it out again, resizes the table (BokehJS renders a resized table anew) and
# changes its rows before putting it back.
_SCENARIO_JS = """
window.scenario = async ({item, attach_after_ms, change_while_out}) => {
  const {Document} = Bokeh.require("document");
  const {add_document_standalone} = Bokeh.require("embed/standalone");
  const host = document.getElementById("host");
  const el = document.createElement("div");
  el.innerHTML = "<div></div>";
  const doc = Document.from_json(item.doc);
  const roots = {[item.root_id]: el.children[0]};
  const settle = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  if (attach_after_ms < 0) host.appendChild(el);
  const rendering = add_document_standalone(doc, el.children[0], roots);
  await settle(Math.max(attach_after_ms, 0));
  host.appendChild(el);
  try { await rendering; } catch (error) { console.error(`rendering failed: ${error.message}`); }
  await settle(300);
  if (change_while_out) {
    el.remove();
    const table = doc.get_model_by_id(item.root_id);
    table.height = table.height + 40;
    table.source.data = {size: [7, 8], name: ["delta", "echo"]};
    await settle(300);
    host.appendChild(el);
  }
  await settle(500);
};
window.table_cells = () => {
  const view = [...Bokeh.index.query((v) => v.model.type === "DataTable")][0];
  return view == null ? null : [...view.shadow_el.querySelectorAll(".slick-cell")]
    .map((cell) => cell.textContent);
};
"""


def _page_html(tmp_path, *, with_fix: bool):
    from scwork.widgets._bokehjs_fixes import DATATABLE_WHEN_CONNECTED_JS
    from scwork.widgets._display import _bokehjs_load_js

    loader = _bokehjs_load_js()
    assert DATATABLE_WHEN_CONNECTED_JS in loader, "the fix must travel with BokehJS to the page"
    if not with_fix:
        loader = loader.replace(DATATABLE_WHEN_CONNECTED_JS, "")
    path = tmp_path / f"table_{'fixed' if with_fix else 'plain'}.html"
    path.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body><div id='host'></div>"
                    f"<script>{loader}</script><script>{_SCENARIO_JS}</script></body></html>")
    return path


def _table_item():
    from bokeh.embed import json_item
    from bokeh.models import ColumnDataSource, DataTable, NumberFormatter, TableColumn

    table = DataTable(source=ColumnDataSource(dict(ROWS)), width=260, height=120, index_position=None,
                      autosize_mode="none", sortable=False, reorderable=False,
                      columns=[TableColumn(field="name", title="buffer", width=160),
                               TableColumn(field="size", title="MiB", width=100,
                                           formatter=NumberFormatter(format="0.0"))])
    return json.loads(json.dumps(json_item(table)))


def _run(offline_page, tmp_path, *, with_fix, attach_after_ms, change_while_out=False):
    offline_page.open(_page_html(tmp_path, with_fix=with_fix))
    offline_page.page.wait_for_function("() => window.Bokeh?.Tables?.DataTable && window.scenario")
    offline_page.page.evaluate("(args) => window.scenario(args)", {
        "item": _table_item(), "attach_after_ms": attach_after_ms, "change_while_out": change_while_out})
    return offline_page.page.evaluate("() => window.table_cells()")


@pytest.mark.parametrize("attach_after_ms", [0, 400])
def test_table_rendered_out_of_the_document_shows_its_rows(offline_page, tmp_path, attach_after_ms):
    cells = _run(offline_page, tmp_path, with_fix=True, attach_after_ms=attach_after_ms)
    offline_page.console.assert_clean()
    assert cells == ["alpha", "3.0", "bravo", "1.0", "charlie", "2.0"]


def test_table_changed_out_of_the_document_shows_the_new_rows(offline_page, tmp_path):
    """Resized and given new rows while out of the page (an explorer changed from a later
    cell while its own cell is scrolled out of view)."""
    cells = _run(offline_page, tmp_path, with_fix=True, attach_after_ms=-1, change_while_out=True)
    offline_page.console.assert_clean()
    assert cells == ["delta", "7.0", "echo", "8.0"]


def test_unpatched_bokehjs_still_needs_the_fix(offline_page, tmp_path):
    _run(offline_page, tmp_path, with_fix=False, attach_after_ms=0)
    assert any("SlickGrid Cannot find stylesheet" in error for error in offline_page.console.errors), (
        "BokehJS no longer fails to build a DataTable rendered out of the document: "
        f"widgets/_bokehjs_fixes.py may be unnecessary now (console: {offline_page.console.errors})")
