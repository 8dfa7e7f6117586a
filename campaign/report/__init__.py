"""``campaign report``: a campaign's self-contained HTML page (page.py), built from what
harvest and status derive (data.py), in sections (sections.py) of escaped HTML pieces
(html.py) and harvest's figures drawn from the same tables as native inline SVG (svg.py,
svg_bars.py, svg_model.py over chart.py's panels)."""
