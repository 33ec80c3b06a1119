"""The foundation every stage stands on: errors, where outputs live (layout), formulas, progress lines,
storage URLs and random streams.
"""
