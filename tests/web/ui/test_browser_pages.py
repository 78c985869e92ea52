"""Issue 49's page-level defects in a real browser (Debian's chromium via Playwright) on the served app:
the Dish page before its first run was a column of empty 200 px placeholders (3,062 px tall at 1440
px, 4,071 px at 420); the whole-trajectory figure was shrunk to unreadable cells at 420 px; the Runs
table cut "what" to about 20 characters and had no design or headline; Compare's differences needed
horizontal scrolling at 1440 px."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_browser import CHROMIUM, opened_page, reopen_run, served, tab  # noqa: F401  (served: a fixture)

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")

#: Every empty placeholder box of the open page taller than 60 px (id of its block, height).
TALL_PLACEHOLDERS = """() => [...document.querySelectorAll('#petri-tabs .empty')].filter((e) => e.offsetParent)
    .map((e) => [e.closest('[id]') ? e.closest('[id]').id : '', e.getBoundingClientRect().height]).filter(([, h]) => h > 60)"""


@pytest.mark.parametrize(("width", "most_px"), [(1440, 2300), (420, 3300)])
def test_the_dish_page_before_a_run_is_not_a_column_of_placeholders(served, width, most_px):
    """Before the first run the Dish page is at most ``most_px`` tall (it was 3,062 px at 1440 and 4,071
    at 420) and no empty figure or download list takes more than 60 px (each took 238 to 264)."""
    with opened_page(served[0], width=width) as page:
        page.wait_for_timeout(500)
        assert page.evaluate(TALL_PLACEHOLDERS) == []
        height = page.evaluate("document.documentElement.scrollHeight")
        assert height <= most_px, height


def seeded(service, events, samples=2, steps=4):
    from petri.app.service import SeedEvent
    from petri.core.dish import Dish

    settings = replace(service.lm.default_settings(), max_denoising_steps=steps)
    return service.seed(service.plan([SeedEvent(Dish(("order", "inventory", "person"), text, "Event: {event}"), group)
                                      for group, text in events], samples, settings)).run_id


LONG_EVENT = "The customer ordered 120 units for delivery on Friday, although the inventory held no units at all."


def test_the_runs_table_reads_what_was_run_with_its_design_and_headline(served):
    """At 1440 px the Runs table's "what" column is at least 300 px wide and shows an event's first 60
    characters whole (it was cut to about 20); "design" and "headline" are in view. At 420 px the
    first columns in view are the kind and what was run (before: run_id and kind only)."""
    _, service, _ = served
    run_id = seeded(service, [(None, LONG_EVENT)])
    with opened_page(served[0], width=1440) as page:
        tab(page, "Runs")
        page.click("#petri-runs-refresh")
        page.wait_for_selector(f"#petri-runs-table:has-text('{run_id}')")
        found = page.evaluate("""() => {
            const table = document.querySelector('#petri-runs-table table');
            const heads = [...table.querySelectorAll('thead th')].map((th) => {
                const r = th.getBoundingClientRect(); return [th.innerText.trim(), r.left, r.right]; });
            return {heads, width: innerWidth};
        }""")
        heads = {name: (left, right) for name, left, right in found["heads"]}
        for name in ("kind", "what", "design", "headline"):
            assert name in heads and heads[name][1] <= found["width"] + 1, (name, found["heads"])
        assert heads["what"][1] - heads["what"][0] >= 300, heads["what"]
        assert page.locator("#petri-runs-table").get_by_text(LONG_EVENT[:60]).count() >= 1
        page.set_viewport_size({"width": 420, "height": 900})
        page.wait_for_timeout(500)
        shown = page.evaluate("""() => {
            const table = document.querySelector('#petri-runs-table table');
            let box = table.parentElement;
            while (box && !['auto', 'scroll', 'hidden'].includes(getComputedStyle(box).overflowX)) box = box.parentElement;
            const view = box.getBoundingClientRect();
            return [...table.querySelectorAll('thead th')].filter((th) => { const r = th.getBoundingClientRect();
                return r.left >= view.left - 1 && r.left < Math.min(view.right, innerWidth); }).map((th) => th.innerText.trim());
        }""")
        assert shown[:2] == ["kind", "what"], shown


@pytest.mark.parametrize("width", [1440, 420])
def test_compares_differences_are_in_view_and_no_header_breaks_mid_word(served, width):
    """Compare's "contradictory − benign" columns needed horizontal scrolling at 1440 px: in both tables
    the difference now comes right after the row's name, wholly in the table's visible box. Issue 60,
    item 11: the paired table's "sample" header wrapped as "sam/ple" (and "contradictory" as
    "contradictor/y"): at 1440 and 420 px no header of either table breaks a word across lines."""
    from test_browser_dish import BROKEN_WORDS

    _, service, _ = served
    run_id = seeded(service, [("benign", "The order was packed."), ("contradictory", "Ninety units in stock, none in stock.")])
    with opened_page(served[0], width=width) as page:
        reopen_run(page, run_id)
        page.wait_for_selector(f"#petri-cmp-status:has-text('{run_id}')")
        page.wait_for_selector("#petri-cmp-paired:has-text('contradictory − benign')")
        broken = page.evaluate(BROKEN_WORDS, "#petri-cmp-pairs thead th, #petri-cmp-paired thead th")
        assert not broken, broken
        if width < 1440:
            return  # a phone: the tables scroll sideways
        for table, column in (("#petri-cmp-pairs", "contradictory − benign"),
                              ("#petri-cmp-paired", "instability contradictory − benign"),
                              ("#petri-cmp-paired", "flips contradictory − benign")):
            in_view = page.evaluate("""([sel, name]) => {
                const table = document.querySelector(sel + ' table');
                let box = table.parentElement;
                while (box && !['auto', 'scroll', 'hidden'].includes(getComputedStyle(box).overflowX)) box = box.parentElement;
                const view = box.getBoundingClientRect();
                const th = [...table.querySelectorAll('thead th')].find((h) => h.innerText.trim() === name);
                if (!th) return null;
                const r = th.getBoundingClientRect();
                return r.left >= view.left - 1 && r.right <= Math.min(view.right, innerWidth) + 1;
            }""", [table, column])
            assert in_view, f"{table}: column {column!r} is not in view"


def test_the_whole_trajectory_figure_scrolls_sideways_at_420_px_with_readable_cells(served):
    """At 420 px the whole-trajectory figure was squeezed into the page (cells of 6 px, text of 7 px):
    it keeps readable cells (text at 10 px or more) and scrolls sideways in a box that fits the page."""
    _, service, _ = served
    run_id = seeded(service, [(None, "The order was packed.")])
    with opened_page(served[0], width=420) as page:
        reopen_run(page, run_id)
        page.wait_for_selector(f"#petri-status:has-text('{run_id}')")
        page.wait_for_selector("#petri-traj-figure .js-plotly-plot .main-svg")
        found = page.evaluate("""() => {
            const box = document.querySelector('#petri-traj-figure');
            const svg = box.querySelector('.main-svg');
            const sizes = [...box.querySelectorAll('.heatmaplayer text, g.textpoint text')]
                .map((t) => parseFloat(getComputedStyle(t).fontSize));
            return {overflow: getComputedStyle(box).overflowX, boxRight: box.getBoundingClientRect().right,
                    scroll: box.scrollWidth, client: box.clientWidth, svgWidth: svg.getBoundingClientRect().width,
                    sizes, width: innerWidth};
        }""")
        assert found["overflow"] == "auto" and found["boxRight"] <= found["width"] + 1, found
        assert found["svgWidth"] > found["width"] and found["scroll"] > found["client"], found
        assert found["sizes"] and min(found["sizes"]) >= 10, found["sizes"][:8]
