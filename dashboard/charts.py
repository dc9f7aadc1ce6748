"""Chart builders: plain functions from DataFrames to plotly figures (no Streamlit)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from dashboard.format import human_tokens

METRIC_LABELS = {
    "view": ("view_tokens_p99", "p99 tokens shown to the model"),
    "raw": ("raw_tokens_p99", "p99 tokens the tool produced"),
    "bytes": ("raw_bytes_p99", "p99 bytes the tool produced"),
    "cost": ("window_cost_tokens", "window cost (tokens re-read by later LLM calls)"),
}


def ranking_bar(table: pd.DataFrame, by: str = "view") -> go.Figure:
    """Horizontal bars, largest on top, with each tool's budget marked where it has one."""
    column, label = METRIC_LABELS[by]
    fig = go.Figure()
    if table.empty:
        fig.update_layout(title="No tool calls yet")
        return fig
    data = table.iloc[::-1]  # plotly draws bottom-up
    fig.add_bar(
        x=data[column],
        y=data["tool"],
        orientation="h",
        name=label,
        text=[human_tokens(v) for v in data[column]],
        textposition="outside",
        marker_color="#d62728",
    )
    if by in ("view", "raw") and "budget_tokens" in data and data["budget_tokens"].notna().any():
        has = data[data["budget_tokens"].notna()]
        fig.add_scatter(
            x=has["budget_tokens"],
            y=has["tool"],
            mode="markers",
            name="budget",
            marker={"symbol": "line-ns-open", "size": 22, "line": {"width": 3}, "color": "#1f77b4"},
        )
    fig.update_layout(
        xaxis_title=label,
        yaxis_title=None,
        height=120 + 40 * len(data),
        margin={"l": 10, "r": 40, "t": 30, "b": 40},
        legend={"orientation": "h", "y": 1.08},
    )
    return fig
