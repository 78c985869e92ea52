"""Uploading a study file in the Study tab of a real browser (Debian's chromium through Playwright)
leaves no refused value behind: the Templates-to-run box held the bundled study's ``t1_describe`` when
the upload set its choices to the new study's ``t1``, and a listener that read the box then had Gradio
refuse it ("Value: 't1_describe' ... is not in the list of choices: ['t1']", logged by the queue).
Every value the server refuses for that box is recorded here (the server runs in this process); an
edit of the templates table still renames the box's choices."""

from __future__ import annotations

import pytest

from tests.web.ui.test_browser import CHROMIUM, opened_page, small_study_file

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")

BOX = "#petri-study-template-ids input"
CHECKED = "els => els.map(e => [e.name, e.checked])"


@pytest.fixture()
def refused(monkeypatch) -> list[str]:
    """Every value a CheckboxGroup's preprocess refuses while the test runs (its error message)."""
    from gradio.components.checkboxgroup import CheckboxGroup

    found: list[str] = []
    original = CheckboxGroup.preprocess

    def recording(self, payload):
        try:
            return original(self, payload)
        except Exception as err:
            found.append(str(err))
            raise

    monkeypatch.setattr(CheckboxGroup, "preprocess", recording)
    return found


def test_an_upload_and_a_table_edit_leave_no_refused_template_choice(tmp_path, live_server, refused):
    from petri.app.service import PetriService
    from petri.engine.torch.tiny import tiny_random_model
    from petri.runs.store import RunStore
    from petri.web.app import create_app

    service = PetriService(tiny_random_model(canvas_length=48), RunStore(tmp_path / "store"))
    try:
        with live_server(create_app(service)) as live, opened_page(live.url) as page:
            page.click("button[role=tab]:has-text('Study')")
            page.click("button:has-text('Study set-up')")
            assert ["t1_describe", True] in page.locator(BOX).evaluate_all(CHECKED)  # the bundled study's
            page.set_input_files("#petri-study-upload input[type=file]", str(small_study_file(tmp_path)))
            page.wait_for_selector("text=Loaded Browser study")
            page.wait_for_function(f"JSON.stringify([...document.querySelectorAll('{BOX}')].map(e => [e.name, e.checked]))"
                                   " === JSON.stringify([['t1', true]])")
            page.wait_for_timeout(2000)  # any listener the upload triggered has answered by now
            assert refused == []
            cell = page.locator("#petri-study-templates [data-testid=cell-0-0]")
            cell.dblclick()
            page.keyboard.press("Control+A")
            page.keyboard.type("t9")
            page.keyboard.press("Enter")
            page.wait_for_function(f"JSON.stringify([...document.querySelectorAll('{BOX}')].map(e => [e.name, e.checked]))"
                                   " === JSON.stringify([['t9', true]])")
            page.wait_for_timeout(2000)
            assert refused == []
    finally:
        service.shutdown()
