"""The weekly drift report: gather from the store, analyze, plot, render, schedule."""
