"""A real Chromium opens the overview and sees the live Triton version."""

import pytest

from .conftest import login

pytestmark = [pytest.mark.integration, pytest.mark.browser]


def test_overview_shows_the_triton_version_in_a_browser(browser, web_server, admin_credentials):
    page = browser.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        assert page.text_content("#triton-version") == "2.51.0"
        assert page.text_content("#control-mode") == "explicit"
        assert page.text_content("#health-triton td.ok") == "up"
        # plotly.min.js is served by the project itself.
        response = page.request.get(f"{web_server.url}/static/vendor/plotly.min.js")
        assert response.ok
    finally:
        page.close()
