"""systolica.driver"""
