"""systolica.boards"""
