# ruff: noqa: F811  (the page fixtures are imported from test_http_page.py)
"""The approval card, for the person who decides: words, amounts, closed sets, who and
when, the tier said plainly, a phone's width, and Chinese text, in a real Chromium.

The screenshots in docs/ are taken here too (`write_screenshots`), so
`WRITEGATE_SCREENSHOTS=1 uv run pytest tests/integration/test_http_page_card.py` refreshes them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.integration.http_fixtures import ROOT, new_order, provider_refunds
from tests.integration.test_http_page import (  # noqa: F401 (fixtures used by name)
    browser,
    key,
    sign_in_and_ask,
    site,
    url,
)

pytestmark = pytest.mark.slow

DOCS = ROOT / "docs"
PHONE_WIDTHS = (375, 390, 420)


def _page(browser: Browser, width: int, height: int = 900) -> Page:
    context = browser.new_context(viewport={"width": width, "height": height})
    tab = context.new_page()
    tab.set_default_timeout(20_000)
    return tab


@pytest.fixture
def wide(browser: Browser) -> Iterator[Page]:
    tab = _page(browser, 1280)
    yield tab
    tab.context.close()


def test_fields_have_words_and_amounts_are_in_major_units(
    wide: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url)
    card = sign_in_and_ask(wide, site, key, f"refund 25.00 CNY of {order} because it broke")
    labels = card.locator(".fields th")
    expect(labels).to_have_text(["Order", "Amount", "Currency", "Reason"])
    expect(card.locator(".field-amount_minor")).to_have_text("¥25.00")
    assert "amount_minor" not in card.locator(".fields").inner_text()


def test_edit_form_uses_major_units_selects_and_keeps_the_target_fixed(
    wide: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url)
    card = sign_in_and_ask(wide, site, key, f"refund 25.00 CNY of {order} because it broke")
    card.locator("button.edit").click()
    form = card.locator(".edit-fields")
    expect(form.locator("input[name=amount_minor]")).to_have_value("25.00")
    expect(form.locator("input[name=order_id]")).to_be_disabled()
    currency = form.locator("select[name=currency]")
    expect(currency).to_have_value("CNY")
    assert set(currency.locator("option").all_inner_texts()) >= {"CNY", "USD", "EUR", "JPY"}
    write_screenshots(card, "approval_edit_form.png")
    edited = edit_amount_and_confirm(wide, card, "¥12.50", shown="¥12.50")
    expect(edited.locator(".result .headline")).to_have_text("Done: succeeded (¥12.50)")
    assert provider_refunds(url, order) == 1


def test_an_amount_with_too_many_decimals_is_refused_and_nothing_changes(
    wide: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url)
    card = sign_in_and_ask(wide, site, key, f"refund 4.00 CNY of {order} because late")
    card.locator("button.edit").click()
    card.locator(".edit-fields input[name=amount_minor]").fill("1.005")
    card.locator(".submit-edit").click()
    expect(card.locator(".refusal")).to_contain_text("decimal place")
    expect(card).to_have_attribute("data-status", "awaiting_confirmation")
    assert provider_refunds(url, order) == 0


def test_card_says_who_asked_when_in_which_thread_and_the_proposal_id(
    wide: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url)
    card = sign_in_and_ask(wide, site, key, f"refund 6.00 CNY of {order} because late")
    expect(card.locator(".asked-by")).to_have_text("user_42")
    expect(card.locator(".asked-at")).not_to_be_empty()
    thread = wide.locator("#app").get_attribute("data-loaded-thread")
    expect(card.locator(".thread")).to_have_text(thread or "?")
    expect(card.locator(".proposal-id")).to_have_text(card.get_attribute("data-proposal-id") or "?")
    expect(card.locator(".copy-id")).to_be_visible()
    expect(card.locator(".tier")).to_have_text(
        "One click confirms: cannot be undone, money or messages leave the system, "
        "sensitive operation refund_order"
    )


def test_a_large_refund_says_in_words_that_it_needs_a_second_approver(
    wide: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url, payable_minor=1_000_000)
    card = sign_in_and_ask(wide, site, key, f"refund 6000.00 CNY of {order} because of fraud")
    expect(card.locator(".tier")).to_contain_text("Needs a second approver: amount ¥6,000.00")
    assert "score" not in card.locator(".tier").inner_text()


@pytest.mark.parametrize("width", PHONE_WIDTHS)
def test_on_a_phone_nothing_scrolls_sideways(browser: Browser, site: str, key: str, url: str,
                                             width: int) -> None:  # fmt: skip
    phone = _page(browser, width, 800)
    try:
        order = new_order(url)
        card = sign_in_and_ask(phone, site, key, f"refund 25.00 CNY of {order} because 商品破损")
        card.locator("button.edit").click()
        widths = phone.evaluate(
            "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
        )
        assert widths[0] <= widths[1] == width, widths
        if width == 390:
            card.locator(".cancel-edit").click()
            write_screenshots(card, "approval_card_mobile.png")
    finally:
        phone.context.close()


def test_chinese_text_renders_with_a_cjk_font(wide: Page, site: str, key: str, url: str) -> None:
    order = new_order(url)
    card = sign_in_and_ask(wide, site, key, f"refund 25.00 CNY of {order} because 商品破损")
    expect(card.locator(".field-reason")).to_have_text("商品破损")
    fonts = _platform_fonts(
        wide, f'.card[data-proposal-id="{card.get_attribute("data-proposal-id")}"] .field-reason'
    )
    assert any("CJK" in f["familyName"] or "Han" in f["familyName"] for f in fonts), fonts
    write_screenshots(card, "approval_card.png")


def _platform_fonts(page: Page, selector: str) -> list[dict[str, Any]]:
    """The fonts Chromium actually drew a node's text with (no tofu, no guessing)."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument")["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    return list(cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"])


def edit_amount_and_confirm(page: Page, card: Any, typed: str, *, shown: str) -> Any:
    """Type `typed` as the amount in the open edit form, then confirm the new card."""
    card.locator(".edit-fields input[name=amount_minor]").fill(typed)
    card.locator(".submit-edit").click()
    waiting = page.locator(".card[data-status=awaiting_confirmation]")
    expect(waiting.locator(".field-amount_minor")).to_have_text(shown)
    edited = page.locator(f'.card[data-proposal-id="{waiting.get_attribute("data-proposal-id")}"]')
    edited.locator("button.confirm").click()
    return edited


def write_screenshots(card: Any, name: str) -> None:
    """Refresh docs/<name> from the live card (desktop, mobile or the edit form) when
    WRITEGATE_SCREENSHOTS=1; otherwise the picture is still taken, into a scratch folder,
    so a test run never changes tracked files."""
    where = DOCS if os.environ.get("WRITEGATE_SCREENSHOTS") == "1" else Path(tempfile.gettempdir())
    card.screenshot(path=str(where / name))


def test_the_thread_history_shows_the_edited_amount_not_the_models(
    wide: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url)
    card = sign_in_and_ask(wide, site, key, f"refund 25.00 CNY of {order} because it broke")
    card.locator("button.edit").click()
    edited = edit_amount_and_confirm(wide, card, "7.00", shown="¥7.00")
    expect(edited).to_have_attribute("data-status", "executed")
    wide.reload()  # the history as the server lists it
    call = wide.locator(".msg.tool-call", has_text="refund_order(")
    expect(call).to_contain_text("amount_minor=700")
    expect(call).to_contain_text("edited by the approver")
    expect(call).not_to_contain_text("amount_minor=2500")
