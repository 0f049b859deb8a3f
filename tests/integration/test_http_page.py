"""The approval page in a real headless Chromium (Debian's, driven by Playwright).

A person signs in with an API key, asks for a refund, sees the exact preview as a
card, and decides. Waiting uses Playwright's auto-waiting `expect`, never a sleep.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Request, Route, expect

from tests.integration.http_fixtures import (
    ROOT,
    ThreadServer,
    make_key,
    new_order,
    provider_refunds,
    seeded_database,
)
from writegate.demo.runtime import open_demo
from writegate.demo.served import DemoApplication
from writegate.surfaces.web import Settings, create_app
from writegate.surfaces.web.services import TTL_ENV

pytestmark = pytest.mark.slow

SHORT_TTL_SECONDS = "4"


@pytest.fixture(scope="module")
def url(create_database: Callable[[], str]) -> str:
    return seeded_database(create_database)


@pytest.fixture(scope="module")
def key(url: str) -> str:
    return make_key(url, "user_42", roles=("approver",))


@pytest.fixture(scope="module")
def site(url: str) -> Iterator[str]:
    runtime = open_demo(url, setup=False).runtime
    try:
        with ThreadServer(create_app(runtime)) as server:
            yield server.url
    finally:
        runtime.close()


@pytest.fixture(scope="module")
def short_site(url: str) -> Iterator[str]:
    """The service configured as `writegate serve` is: from the environment, here with
    proposals that expire after a few seconds. It opens its own runtime at startup."""
    env = {"DATABASE_URL": url, TTL_ENV: SHORT_TTL_SECONDS}
    app = create_app(settings=Settings.from_env(env), application=DemoApplication())
    with ThreadServer(app) as server:
        yield server.url


@pytest.fixture
def browser(chromium: Browser) -> Browser:
    return chromium


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.set_default_timeout(20_000)
    yield tab
    context.close()


def sign_in_and_ask(page: Page, base: str, key: str, text: str) -> Any:
    """Sign in, send `text`, and return the locator of the approval card it produces."""
    page.goto(base + "/")
    page.fill("#api-key", key)
    page.click("#login-form button[type=submit]")
    expect(page.locator("#who")).to_have_text("user_42 · tenant_hz")
    app = page.locator("#app[data-loaded-thread]")
    first_thread = app.get_attribute("data-loaded-thread")
    page.click("#new-thread")  # a fresh conversation: no cards from earlier tests
    expect(app).not_to_have_attribute("data-loaded-thread", first_thread or "")
    expect(page.locator("#no-cards")).to_be_visible()
    page.fill("#message", text)
    page.click("#send")
    first = page.locator(".card").first
    expect(first).to_have_attribute("data-status", "awaiting_confirmation")
    # Pinned by proposal id: a card made later (an edit) must not take its place.
    return page.locator(f'.card[data-proposal-id="{first.get_attribute("data-proposal-id")}"]')


def test_message_to_proposal_to_confirm_to_receipt(
    page: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url)
    card = sign_in_and_ask(page, site, key, f"refund 25.00 CNY of {order} because it broke")
    expect(card.locator(".title")).to_have_text(f"Refund order {order}")
    expect(card.locator(".operation")).to_have_text("refund_order")
    expect(card.locator(".field-amount_minor")).to_have_text("¥25.00")
    expect(card.locator(".field-reason")).to_have_text("it broke")
    expect(card.locator(".flags")).to_contain_text("Irreversible")
    expect(card.locator(".countdown")).to_contain_text("Expires in")
    (ROOT / "artifacts").mkdir(exist_ok=True)
    card.screenshot(path=str(ROOT / "artifacts" / "approval_card.png"))
    assert provider_refunds(url, order) == 0

    card.locator("button.confirm").click()
    expect(card).to_have_attribute("data-status", "executed")
    receipt = card.locator(".result[data-kind=receipt]")
    expect(receipt.locator(".headline")).to_have_text("Done: succeeded (¥25.00)")
    expect(receipt.locator(".execution-id")).to_contain_text("Execution exec_")
    expect(page.locator(".msg.assistant").last).to_contain_text("refund_order succeeded")
    assert provider_refunds(url, order) == 1

    page.reload()  # decided approvals stay visible as history
    again = page.locator(".card").first
    expect(again).to_have_attribute("data-status", "executed")
    expect(again.locator(".result .execution-id")).to_have_text(
        receipt.locator(".execution-id").inner_text()
    )
    expect(again.locator("button.confirm")).to_be_hidden()


def test_buttons_wait_for_the_decision_and_a_double_click_executes_once(
    page: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url)
    card = sign_in_and_ask(page, site, key, f"refund 5.00 CNY of {order} because it is late")
    held: list[Any] = []
    page.route("**/decision", lambda route: held.append(route))  # hold the request
    card.locator("button.confirm").dblclick()
    expect(card.locator("button.confirm")).to_be_disabled()
    expect(card.locator("button.decline")).to_be_disabled()
    expect(card.locator("button.edit")).to_be_disabled()
    assert len(held) == 1  # the second click met a disabled button
    held[0].continue_()
    expect(card).to_have_attribute("data-status", "executed")
    expect(card.locator(".result[data-kind=receipt]")).to_be_visible()
    assert provider_refunds(url, order) == 1


def test_decline_shows_that_nothing_ran(page: Page, site: str, key: str, url: str) -> None:
    order = new_order(url)
    card = sign_in_and_ask(page, site, key, f"refund 7.00 CNY of {order} because why not")
    card.locator("button.decline").click()
    expect(card).to_have_attribute("data-status", "declined")
    expect(card.locator(".result .headline")).to_have_text("Declined: nothing was executed")
    expect(card.locator("button.confirm")).to_be_hidden()
    assert provider_refunds(url, order) == 0


def test_an_expired_card_stays_as_history(page: Page, short_site: str, key: str, url: str) -> None:
    order = new_order(url)
    card = sign_in_and_ask(page, short_site, key, f"refund 9.00 CNY of {order} because slow")
    expect(card.locator(".countdown")).to_contain_text("Expires in")
    expect(card).to_have_attribute("data-status", "expired", timeout=15_000)
    expect(card.locator(".countdown")).to_contain_text("Expired at")
    expect(card.locator("button.confirm")).to_be_hidden()
    page.reload()  # the server agrees: expired, still listed
    expect(page.locator(".card").first).to_have_attribute("data-status", "expired")
    assert provider_refunds(url, order) == 0


def test_edit_replaces_the_card_with_a_new_preview(
    page: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url)
    card = sign_in_and_ask(page, site, key, f"refund 8.00 CNY of {order} because of a dent")
    card.locator("button.edit").click()
    amount = card.locator(".edit-fields input[name=amount_minor]")
    expect(amount).to_have_value("8.00")  # major units, as the card shows ¥8.00
    amount.fill("3.00")
    card.locator(".submit-edit").click()
    expect(card).to_have_attribute("data-status", "superseded")
    waiting = page.locator(".card[data-status=awaiting_confirmation]")
    expect(waiting.locator(".field-amount_minor")).to_have_text("¥3.00")
    edited = page.locator(f'.card[data-proposal-id="{waiting.get_attribute("data-proposal-id")}"]')
    edited.locator("button.confirm").click()
    expect(edited.locator(".result .headline")).to_have_text("Done: succeeded (¥3.00)")
    assert provider_refunds(url, order) == 1


def test_the_end_of_a_turn_leaves_the_focus_where_the_person_is_typing(
    page: Page, site: str, key: str, url: str
) -> None:
    """A turn that ends while the person types the re-typed amount into a card (the
    turn's last event can come after its question) gives the message box back, but does
    not take their keystrokes into it."""
    order = new_order(url, payable_minor=1_000_000)
    card = sign_in_and_ask(page, site, key, f"refund 6000.00 CNY of {order} because of fraud")
    retype = card.locator(".retype-input")
    retype.click()
    page.keyboard.type("60")
    page.evaluate("setComposer(true)")  # what the page does as a turn ends
    page.keyboard.type("00")
    expect(retype).to_have_value("6000")
    expect(page.locator("#message")).to_have_value("")
    expect(page.locator("#message")).to_be_enabled()


def test_a_large_refund_is_retyped_then_approved_by_a_second_person(
    browser: Browser, page: Page, site: str, key: str, url: str
) -> None:
    order = new_order(url, payable_minor=1_000_000)
    card = sign_in_and_ask(page, site, key, f"refund 6000.00 CNY of {order} because of fraud")
    expect(card.locator(".tier")).to_contain_text("second approver")
    card.locator(".retype-input").fill("6000")
    card.locator("button.confirm").click()
    expect(card).to_have_attribute("data-status", "awaiting_second_approval")
    expect(card.locator(".note")).to_contain_text("An approver of your tenant must now approve")
    expect(card.locator("button.confirm")).to_be_hidden()
    assert provider_refunds(url, order) == 0

    approver_key = make_key(url, "user_7", roles=("approver",))
    reviewer = browser.new_context().new_page()
    reviewer.goto(site + "/")
    reviewer.fill("#api-key", approver_key)
    reviewer.click("#login-form button[type=submit]")
    pid = card.get_attribute("data-proposal-id")
    review = reviewer.locator(f'#review-cards .card[data-proposal-id="{pid}"]')
    expect(review.locator(".requester")).to_have_text("Requested by user_42")
    expect(review.locator(".field-amount_minor")).to_have_text("¥6,000.00")
    review.locator("button.approve").click()
    expect(review.locator(".result .headline")).to_contain_text("Approved")
    reviewer.context.close()

    # The approval ran the write: the requester's card follows with no click of theirs.
    expect(card.locator(".status")).to_have_text("Executed")
    expect(card).to_have_attribute("data-status", "executed")
    expect(card.locator("button.confirm")).to_be_hidden()
    assert provider_refunds(url, order) == 1


def test_the_page_works_under_a_strict_content_security_policy(
    page: Page, site: str, key: str, url: str
) -> None:
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(m.text) if m.type in ("error", "warning") else None,
    )
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    document = page.request.get(site + "/")
    policy = document.headers.get("content-security-policy", "")
    directives = dict(part.strip().partition(" ")[::2] for part in policy.split(";"))
    assert directives.get("frame-ancestors") == "'none'", policy
    assert directives.get("default-src") == "'self'", policy
    for kind in ("script-src", "style-src"):
        assert directives.get(kind) == "'self'", policy  # no inline script or style
    assert document.headers.get("x-content-type-options") == "nosniff"
    assert document.headers.get("x-frame-options") == "DENY"
    for asset in ("/static/app.js", "/static/style.css"):
        assert page.request.get(site + asset).headers.get("x-content-type-options") == "nosniff"

    order = new_order(url)
    card = sign_in_and_ask(page, site, key, f"refund 12.00 CNY of {order} because it broke")
    expect(card.locator(".field-amount_minor")).to_have_text("¥12.00")
    card.locator("button.confirm").click()
    expect(card).to_have_attribute("data-status", "executed")
    assert provider_refunds(url, order) == 1
    violations = [p for p in problems if "Content Security Policy" in p or "Refused to" in p]
    assert violations == [], violations


def test_a_page_whose_stream_breaks_mid_turn_gets_the_rest_once(
    page: Page, site: str, key: str, url: str
) -> None:
    """The turn's stream is cut after its first event; the page asks for the rest by
    Last-Event-ID (under the strict policy) and shows each message and card once."""
    problems: list[str] = []
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    resumed: list[str] = []

    def cut_after_first_event(route: Route) -> None:
        whole = route.fetch()
        first = whole.text().split("\n\n", 1)[0] + "\n\n"
        route.fulfill(response=whole, body=first)

    def record(request: Request) -> None:
        if request.url.endswith("/events"):
            resumed.append(request.headers.get("last-event-id", ""))

    page.route("**/v1/threads/*/messages", cut_after_first_event)
    page.on("request", record)
    order = new_order(url)
    card = sign_in_and_ask(page, site, key, f"refund 9.00 CNY of {order} because it broke")
    expect(card.locator(".field-amount_minor")).to_have_text("¥9.00")
    expect(page.locator("#send")).to_be_enabled()  # the turn is over for the page
    assert len(resumed) == 1 and resumed[0].endswith(":0"), resumed
    assert page.locator(".card").count() == 1
    texts = page.locator(".msg.assistant").all_inner_texts()
    assert len(texts) == len(set(texts)), texts
    assert page.locator("#chat-error").inner_text() == ""
    assert [p for p in problems if "Refused to" in p or "Security Policy" in p] == []
