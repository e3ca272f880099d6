"""The operators' page, /ops/: the view (views) and the chart builder it draws with (charts)."""
