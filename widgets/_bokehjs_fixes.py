"""Fixes to BokehJS that the explorers need in JupyterLab, sent with BokehJS itself.

Only one so far: a ``DataTable`` drawn while its element is out of the document.

BokehJS builds a ``DataTable``'s grid (SlickGrid) as soon as the view is rendered.
SlickGrid adds a ``<style>`` element to the view's shadow root and then looks its
sheet up in ``shadowRoot.styleSheets``; a ``<style>`` that is not in the document
has no sheet, so SlickGrid throws "SlickGrid Cannot find stylesheet." and the table
stays unbuilt (bokeh issues #2914 and #13787 show the same error for tables shown
before their element is in the page). In JupyterLab this happens whenever the view
is rendered while its cell is out of the document, which JupyterLab does with the
cells scrolled out of view: an explorer whose output arrives after Run All has
scrolled past it, or an explorer changed from a later cell (``apply_fix`` resizes
the MemoryTimeline's table, and BokehJS renders a resized table again).

The fix defers the grid, not the view: while the element is out of the document the
view renders as BokehJS renders every other view, and the table is rendered again
(``rerender``) once the element is back in the document. Until then, the methods
that need the grid skip it (a data change or a selection then arrives with the
rendering).
"""

from __future__ import annotations

__all__ = ["DATATABLE_WHEN_CONNECTED_JS"]

#: Patches BokehJS's ``DataTableView`` once per page (idempotent), as soon as the
#: tables bundle is there; the loader runs it after loading BokehJS, and again in a
#: page that already has BokehJS.
DATATABLE_WHEN_CONNECTED_JS = r"""
(function scworkPatchDataTable(attempt) {
  const DataTable = window.Bokeh && window.Bokeh.Tables && window.Bokeh.Tables.DataTable;
  const View = DataTable && DataTable.prototype.default_view;
  if (View == null) {
    // The tables bundle is not evaluated yet: try again shortly (for up to 30 s).
    if (attempt < 300) setTimeout(() => scworkPatchDataTable(attempt + 1), 100);
    return;
  }
  const proto = View.prototype;
  if (proto._scwork_renders_when_connected) return;
  proto._scwork_renders_when_connected = true;
  const parent = Object.getPrototypeOf(proto);
  const after_render = proto._after_render;
  proto._after_render = function () {
    if (this.el.isConnected) return after_render.call(this);
    parent._after_render.call(this);
    // A grid built in the document before (the table is rendered again while its cell
    // is out of view) belongs to the element just replaced: let it go with it.
    if (this.grid !== undefined) { this.grid.destroy(); this.grid = undefined; }
    if (this._scwork_waiting) return;
    this._scwork_waiting = true;
    const when_connected = () => {
      if (this._destroyed) return;
      if (!this.el.isConnected) { setTimeout(when_connected, 100); return; }
      this._scwork_waiting = false;
      this.rerender();
    };
    setTimeout(when_connected, 0);
  };
  for (const name of ["_after_layout", "_after_resize"]) {
    const method = proto[name];
    proto[name] = function () { return (this.grid === undefined ? parent[name] : method).call(this); };
  }
  for (const name of ["updateGrid", "updateSelection"]) {
    const method = proto[name];
    proto[name] = function () { if (this.grid !== undefined) return method.call(this); };
  }
  const remove = proto.remove;
  proto.remove = function () {
    if (this.grid === undefined) this.grid = {destroy() {}};
    return remove.call(this);
  };
})(0);
"""
