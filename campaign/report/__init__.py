"""``campaign report``: a campaign's self-contained HTML page (page.py), built from what
harvest and status derive (data.py), in sections (sections.py) of escaped HTML pieces
(html.py) and harvest's figures as inline SVG (svg.py)."""
